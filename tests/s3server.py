"""An S3-compatible server for the tests that need a bucket: moto's server mode, started by the
test module itself on a free port of this machine (nothing downloaded, nothing outside reached).

``endpoint`` (module scope) starts it and sets what every S3 client reads: ``AWS_ENDPOINT_URL``
and test credentials (:data:`CREDENTIALS`), restored afterwards; ``bucket`` makes a new empty
bucket and returns its name. Import both into a test module to use them.
"""
from __future__ import annotations

import logging
import os
import uuid

import pytest

moto_server = pytest.importorskip("moto.server")

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def endpoint():
    """An S3-compatible server on localhost (moto), and the environment every client reads:
    AWS_ENDPOINT_URL and test credentials (restored afterwards)."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)      # no request log on stderr
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    saved = {k: os.environ.get(k) for k in [*CREDENTIALS, "AWS_ENDPOINT_URL"]}
    os.environ.update(CREDENTIALS, AWS_ENDPOINT_URL=url)
    _fresh_clients()
    try:
        yield url
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        _fresh_clients()
        server.stop()


def _fresh_clients() -> None:
    """Forget fsspec's cached S3 clients (they keep the credentials they were made with)."""
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def bucket(endpoint) -> str:
    """A new empty bucket; its name."""
    import s3fs

    name = f"sb-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(skip_instance_cache=True).mkdir(name)
    return name
