#!/usr/bin/env python3
"""client/test_http_fixture.py: canned HTTP answers for client/test_dlt_http.

Not a ledger: every answer is chosen by the request itself, so the unit test
of src/dlt_http.c can ask for exactly the status code, body or delay it is
about to check.

  POST /submit/<code>/...           answer <code> (302 carries a Location)
  POST /stall/<seconds>/...         wait, then answer 202
  GET  /status?code=N&b=BODY&...    answer N with BODY (percent-decoded)
  GET  /stall?s=SECONDS&...         wait, then answer 200 with []
  GET  /limit?k=K&ids=A,B,...       more than K ids: answer with code= (414
                                    unless given); an id equal to fail=
                                    among them: 503; otherwise 200 with a
                                    Sawtooth body giving each id COMMITTED
  GET  /last                        the last POST or status GET, as JSON:
                                    path, content type, body length and
                                    hex, and every header (lower-case name)
  GET  /conns                       how many TCP connections were accepted
  GET  /gets[?reset=1]              the status GETs (/status, /stall,
                                    /limit) since the last reset, as JSON:
                                    count, and the number of ids of each
                                    (reset=1: forget them after answering)

Usage: test_http_fixture.py PORT_FILE [MAX_LIFETIME_SECONDS]
Binds 127.0.0.1 on a free port, writes the port to PORT_FILE, and exits by
itself after MAX_LIFETIME_SECONDS (default 120).
"""
import json
import os
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATE = {"last": {}, "conns": 0, "gets": []}
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        with LOCK:
            STATE["conns"] += 1

    def log_message(self, fmt, *args):
        pass

    def answer(self, code, body=b"", extra=None):
        self.send_response(code)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def record(self, body):
        last = {
            "path": self.path,
            "method": self.command,
            "content_type": self.headers.get("Content-Type"),
            "body_len": len(body),
            "body_hex": body.hex(),
        }
        for k, v in self.headers.items():
            last.setdefault(k.lower(), v)
        with LOCK:
            STATE["last"] = last

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        self.record(body)
        parts = self.path.split("/")
        if len(parts) > 2 and parts[1] == "submit":
            code = int(parts[2])
            extra = {"Location": "/submit/200/redirected"} if 300 <= code < 400 else None
            self.answer(code, b"{}", extra)
        elif len(parts) > 2 and parts[1] == "stall":
            time.sleep(float(parts[2]))
            self.answer(202, b"{}")
        else:
            self.answer(404)

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/last":
            with LOCK:
                self.answer(200, json.dumps(STATE["last"]).encode())
            return
        if url.path == "/conns":
            with LOCK:
                self.answer(200, str(STATE["conns"]).encode())
            return
        # the body may contain '+' and ',': split by hand, decode with unquote
        query = {}
        raw = {}
        for item in url.query.split("&"):
            k, _, v = item.partition("=")
            raw[k] = v
            query[k] = urllib.parse.unquote_to_bytes(v)
        if url.path == "/gets":
            with LOCK:
                self.answer(200, json.dumps({"count": len(STATE["gets"]),
                                             "ids": STATE["gets"]}).encode())
                if query.get("reset") == b"1":
                    STATE["gets"] = []
            return
        self.record(b"")
        # the ids: comma-separated, each percent-encoded on its own
        ids = [urllib.parse.unquote(i) for i in raw.get("ids", "").split(",")]
        if url.path in ("/status", "/stall", "/limit"):
            with LOCK:
                STATE["gets"].append(len(ids))
        if url.path == "/status":
            self.answer(int(query.get("code", b"200")), query.get("b", b""))
        elif url.path == "/stall":
            time.sleep(float(query.get("s", b"1")))
            self.answer(200, b"[]")
        elif url.path == "/limit":
            if len(ids) > int(query.get("k", b"1")):
                self.answer(int(query.get("code", b"414")), b"too many")
            elif "fail" in query and query["fail"].decode() in ids:
                self.answer(503, b"unavailable")
            else:
                body = {"data": [{"id": i, "status": "COMMITTED"} for i in ids]}
                self.answer(200, json.dumps(body).encode())
        else:
            self.answer(404)


def main():
    port_file = sys.argv[1]
    lifetime = float(sys.argv[2]) if len(sys.argv) > 2 else 120.0
    # many connections may arrive at once (the multi test): a deep backlog
    ThreadingHTTPServer.request_queue_size = 64
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(port_file + ".tmp", port_file)
    threading.Timer(lifetime, server.shutdown).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
