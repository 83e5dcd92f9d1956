"""The files a download will fetch, with their sizes and checksums, read by the portal from the
Hub (or the mirror in HF_ENDPOINT) before anything starts on the host: the disk-space check, the
progress total and the checksums all come from here.

Hugging Face: `HfApi.model_info(files_metadata=True)` (the same endpoint the host's client calls
first) and the client's own pattern filter, so the list is exactly what `hf download --include`
fetches. ModelScope: its repository file listing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import httpx
from django.utils.translation import gettext as _

from .choices import DownloadSource


class ListingError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass
class RepoFile:
    name: str
    size: int
    sha256: str = ""  # LFS files: the checksum verified after the download
    etag: str = ""  # what the client names its partial file after (`<hash>.<etag>.incomplete`)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "done": 0}


def patterns(pattern: str) -> list[str]:
    return pattern.split()


def list_files(
    *, source: str, endpoint: str, repo_id: str, revision: str, pattern: str, token: str
) -> tuple[str, list[RepoFile]]:
    """(commit, files) of `repo_id` at `revision` that `pattern` selects."""
    if source == DownloadSource.MODELSCOPE:
        return _modelscope(endpoint, repo_id, revision, pattern, token)
    return _huggingface(endpoint, repo_id, revision, pattern, token)


def _huggingface(endpoint: str, repo_id: str, revision: str, pattern: str, token: str) -> tuple[str, list[RepoFile]]:
    # Imported here: huggingface_hub is only needed by the worker that checks a download.
    from huggingface_hub import HfApi
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    from huggingface_hub.utils import filter_repo_objects

    api = HfApi(endpoint=endpoint, token=token or False)
    try:
        info = api.model_info(repo_id, revision=revision, files_metadata=True, timeout=30)
    except GatedRepoError:
        raise ListingError(
            _("%(repo)s is gated: accept its terms on the Hub, then give an access token that may read it.")
            % {"repo": repo_id}
        ) from None
    except RevisionNotFoundError:
        raise ListingError(
            _("%(repo)s has no revision %(revision)s at %(endpoint)s.")
            % {"repo": repo_id, "revision": revision, "endpoint": endpoint}
        ) from None
    except RepositoryNotFoundError:
        raise ListingError(
            _("%(repo)s was not found at %(endpoint)s (or it is private: give an access token).")
            % {"repo": repo_id, "endpoint": endpoint}
        ) from None
    except (HfHubHTTPError, httpx.HTTPError, OSError) as exc:
        raise ListingError(
            _("The file list of %(repo)s could not be read from %(endpoint)s: %(error)s")
            % {"repo": repo_id, "endpoint": endpoint, "error": str(exc)[:300]}
        ) from None
    siblings = list(
        filter_repo_objects(info.siblings or [], allow_patterns=patterns(pattern) or None, key=lambda s: s.rfilename)
    )
    files = [
        RepoFile(
            name=s.rfilename,
            size=int(s.lfs.size if s.lfs else s.size or 0),
            sha256=s.lfs.sha256 if s.lfs else "",
            etag=s.lfs.sha256 if s.lfs else (s.blob_id or ""),
        )
        for s in siblings
    ]
    return info.sha or revision, files


def _modelscope(endpoint: str, repo_id: str, revision: str, pattern: str, token: str) -> tuple[str, list[RepoFile]]:
    from huggingface_hub.utils import filter_repo_objects

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = f"{endpoint.rstrip('/')}/api/v1/models/{repo_id}/repo/files"
    try:
        response = httpx.get(
            url, params={"Revision": revision, "Recursive": "true"}, headers=headers, timeout=30, follow_redirects=False
        )
        response.raise_for_status()
        entries = response.json()["Data"]["Files"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise ListingError(
            _("The file list of %(repo)s could not be read from %(endpoint)s: %(error)s")
            % {"repo": repo_id, "endpoint": endpoint, "error": str(exc)[:300]}
        ) from None
    blobs = [e for e in entries if e.get("Type") == "blob"]
    chosen = filter_repo_objects(blobs, allow_patterns=patterns(pattern) or None, key=lambda e: e["Path"])
    files = [RepoFile(name=e["Path"], size=int(e.get("Size") or 0), sha256=e.get("Sha256") or "") for e in chosen]
    return revision, files
