"""An HTTP relay in front of an S3-compatible server (moto), for tests and the bench.

It forwards every request to ``--upstream`` unchanged (so S3 signatures stay valid: the
``Host`` header is passed on as sent) and can

* wait ``--delay-ms`` before forwarding each request, to stand in for a real object
  store's round trip (the bench's arms), and count the requests it relayed
  (``GET /__relay/requests`` answers the count; it is not forwarded);
* refuse every write (``PUT``/``POST``/``DELETE``) with S3's ``403 AccessDenied`` while
  reads pass, as a bucket whose policy denies writes does (``--refuse-writes``), or only
  the writes whose request path contains a text (``--refuse-writes-to TEXT``, e.g.
  ``-m0.avro`` for manifests).

Run: ``python s3_relay.py --upstream http://127.0.0.1:PORT [--delay-ms 20]
[--refuse-writes | --refuse-writes-to TEXT]``; it prints ``listening <port>`` on stdout once it accepts
connections on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import sys
import threading
import time
import urllib.parse

ACCESS_DENIED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b"<Error><Code>AccessDenied</Code><Message>Access Denied (relay refuses writes)"
    b"</Message></Error>"
)
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"}


def make_handler(
    upstream: urllib.parse.SplitResult, delay_s: float, refuse_writes: bool, refuse_to: str | None
):
    counter = {"requests": 0}
    lock = threading.Lock()
    local = threading.local()

    class Relay(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def _relay(self):
            if self.path == "/__relay/requests":
                with lock:
                    body = str(counter["requests"]).encode()
                self._answer(200, body, "text/plain")
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            with lock:
                counter["requests"] += 1
            refused = refuse_writes or (refuse_to is not None and refuse_to in self.path)
            if refused and self.command in ("PUT", "POST", "DELETE"):
                self._answer(403, ACCESS_DENIED, "application/xml")
                return
            if delay_s:
                time.sleep(delay_s)
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=60)
                local.conn = conn
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException):
                local.conn = None
                conn.close()
                self._answer(502, b"relay: upstream failed", "text/plain")
                return
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _answer(self, status: int, body: bytes, content_type: str):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay

    return Relay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="http://host:port of the S3 server")
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--refuse-writes", action="store_true")
    parser.add_argument("--refuse-writes-to", default=None)
    args = parser.parse_args()
    upstream = urllib.parse.urlsplit(args.upstream)
    handler = make_handler(
        upstream, args.delay_ms / 1000.0, args.refuse_writes, args.refuse_writes_to
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    print(f"listening {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
