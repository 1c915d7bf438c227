"""A fake Anthropic Messages API on loopback playing a scripted agent, so tests drive the real
`anthropic` client without network: `with FakeMessagesServer(steps) as server:`, then
`make_backend("anthropic", api_key="test", base_url=server.base_url)`; `server.requests` holds
every request body. Each POST /v1/messages consumes the next step: a list of content blocks
(`tool_use(name, **input)`, `text(value)`), a dict (a full reply {"content", "stop_reason",
"usage"}, or an HTTP error {"status": 529} as `overloaded()` gives), or a callable(request_json)
returning either. Block ids are filled in; stop_reason is "tool_use" if a block is one, else
"end_turn". Past the last step the server answers 400, so a test fails loudly.
"""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ERROR_TYPES = {400: "invalid_request_error", 429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def tool_use(name: str, **tool_input) -> dict:
    return {"type": "tool_use", "name": name, "input": tool_input}


def overloaded(retry_after_ms: int | None = None) -> dict:
    """A 529; `retry_after_ms` sets the header the client's own retry waits on."""
    headers = {"retry-after-ms": str(retry_after_ms)} if retry_after_ms is not None else {}
    return {"status": 529, "headers": headers}


def tool_results(request: dict) -> list[dict]:
    """The tool_result blocks of a request's last (user) message."""
    content = request["messages"][-1]["content"]
    return [block for block in content if isinstance(block, dict) and block.get("type") == "tool_result"]


class FakeMessagesServer:
    def __init__(self, script: list, usage: dict | None = None):
        self.script = list(script)
        self.usage = usage or {"input_tokens": 1000, "output_tokens": 100}
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.01,), daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> "FakeMessagesServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def reply(self, request: dict) -> tuple[int, dict, dict]:
        """(HTTP status, headers, JSON body) for one request; consumes one step."""
        with self._lock:
            index = len(self.requests)
            self.requests.append(request)
        if index >= len(self.script):
            return _error(400, f"fake server: script exhausted after {len(self.script)} steps")
        step = self.script[index]
        step = step(request) if callable(step) else step
        if isinstance(step, dict) and "status" in step:
            status, headers, body = _error(step["status"], step.get("message", "scripted error"))
            return status, {**headers, **step.get("headers", {})}, body
        return 200, {}, self._message(index, request, step)

    def _message(self, index: int, request: dict, step) -> dict:
        reply = step if isinstance(step, dict) else {"content": step}
        content = [dict(block) for block in reply["content"]]
        for number, block in enumerate(content):
            if block["type"] == "tool_use":
                block.setdefault("id", f"toolu_{index:03d}_{number}")
        has_tool_use = any(block["type"] == "tool_use" for block in content)
        return {"id": f"msg_fake_{index:03d}", "type": "message", "role": "assistant", "content": content,
                "model": request.get("model", "fake"), "stop_sequence": None,
                "stop_reason": reply.get("stop_reason", "tool_use" if has_tool_use else "end_turn"),
                "usage": reply.get("usage", self.usage)}


def _error(status: int, message: str) -> tuple[int, dict, dict]:
    kind = ERROR_TYPES.get(status, "api_error")
    return status, {}, {"type": "error", "error": {"type": kind, "message": message}}


def _handler_for(server: FakeMessagesServer):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            if self.path.split("?")[0] != "/v1/messages":
                return self._send(404, {}, {"type": "error",
                                            "error": {"type": "not_found_error", "message": self.path}})
            request = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
            self._send(*server.reply(request))

        def _send(self, status: int, headers: dict, body: dict):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):  # keep pytest output clean
            pass
    return Handler
