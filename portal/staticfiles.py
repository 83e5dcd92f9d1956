"""WhiteNoise's middleware with a body Django can send under ASGI without a thread.

WhiteNoise 6 answers with a file object, a synchronous iterator: under ASGI Django warns for every
static file and reads the whole of it into a list in its one thread for sync code, the thread every
sync view waits for too. Here the same response (WhiteNoise picks the file, its gzip or brotli
variant, the range, the status and every header) comes with an asynchronous iterator that reads
the file in the event loop, a block at a time: the files are local and small, and a read from the
page cache costs less than a hop to a thread. Under WSGI (the test client) WhiteNoise answers as it
always did. (WhiteNoise 6.12 has no ASGI support of its own; the middleware itself still runs in
Django's thread with the rest of the sync middleware: an async-only variant measured no faster,
bench/README.md.)"""

from collections.abc import AsyncIterator
from typing import BinaryIO

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, StreamingHttpResponse
from whitenoise.middleware import WhiteNoiseMiddleware
from whitenoise.responders import StaticFile

BLOCK_SIZE = 64 * 1024  # Django's ASGI handler sends the body in messages of this size


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    """`whitenoise.middleware.WhiteNoiseMiddleware`, answering an ASGI request with an async body."""

    @staticmethod
    def serve(static_file: StaticFile, request: HttpRequest) -> StreamingHttpResponse:
        if not isinstance(request, ASGIRequest):
            return WhiteNoiseMiddleware.serve(static_file, request)
        answer = static_file.get_response(request.method, request.META)
        response = StreamingHttpResponse(_blocks(answer.file), status=int(answer.status))
        del response["Content-Type"]  # Django's default; WhiteNoise's own is among the headers
        for name, value in answer.headers:
            response[name] = value
        return response


async def _blocks(file: BinaryIO | None) -> AsyncIterator[bytes]:
    """The file's bytes (none for HEAD, 304, 416), the file closed at the end, and also when the
    client leaves mid-file: Django then drops the response unclosed, and this generator's
    finalizer closes it."""
    if file is None:
        return
    with file:
        while block := file.read(BLOCK_SIZE):
            yield block
