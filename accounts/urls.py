from django.contrib.auth import views as auth_views
from django.urls import path

from . import views
from .sso import views as sso_views

urlpatterns = [
    path("login/", views.LoginView.as_view(), name="login"),
    path("oidc/login/", sso_views.OidcLoginView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", sso_views.OidcCallbackView.as_view(), name="oidc_authentication_callback"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("account/", views.account, name="account"),
    path("language/", views.set_language, name="set_language"),
    path("account/password/", views.PasswordChangeView.as_view(), name="password_change"),
    path("account/tokens/new/", views.token_create, name="token_create"),
    path("account/tokens/<int:pk>/revoke/", views.TokenRevokeView.as_view(), name="token_revoke"),
    path("users/", views.UserListView.as_view(), name="user_list"),
    path("users/new/", views.UserCreateView.as_view(), name="user_create"),
    path("users/<int:pk>/", views.UserDetailView.as_view(), name="user_detail"),
    path("users/<int:pk>/edit/", views.UserEditView.as_view(), name="user_edit"),
    path("users/<int:pk>/activation/", views.UserActivationView.as_view(), name="user_activation"),
    path("users/<int:pk>/unlock/", views.UserUnlockView.as_view(), name="user_unlock"),
    path("users/<int:pk>/reset-password/", views.UserResetPasswordView.as_view(), name="user_reset_password"),
    path("teams/", views.TeamListView.as_view(), name="team_list"),
    path("teams/new/", views.TeamEditView.as_view(), name="team_create"),
    path("teams/<int:pk>/", views.TeamDetailView.as_view(), name="team_detail"),
    path("teams/<int:pk>/edit/", views.TeamEditView.as_view(), name="team_edit"),
    path("teams/<int:pk>/members/<int:member_pk>/", views.MemberLimitsView.as_view(), name="team_member"),
    path("audit-log/", views.AuditLogView.as_view(), name="audit_log"),
]
