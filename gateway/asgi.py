"""The gateway's ASGI front door (2/6 fills it in). Until then everything goes to Django."""


def build_application(django_app):
    async def application(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        await django_app(scope, receive, send)

    return application
