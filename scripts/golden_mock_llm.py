#!/usr/bin/env python3
"""A deterministic OpenAI-compatible chat server for scripts/golden.sh (standard library only).

Answers like the constrained mock model of tests/support/mod.rs: nuggets "<title> needs ALPHA" and
"<title> also needs BETA"; sub-questions and a closed-book answer; judgments where document D<i>
supports N1 when its text has ALPHA and N2 when it has BETA. Prints the port it listens on, then
serves until killed.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def answer(request):
    first_user = next(m["content"] for m in request["messages"] if m["role"] == "user")
    title = next(
        (line[len("Question title: "):] for line in first_user.splitlines()
         if line.startswith("Question title: ")),
        "",
    )
    text = "\n".join(m["content"] for m in request["messages"])
    if '"judgments"' not in text:
        if '"nuggets"' in text:
            return {"nuggets": [f"{title} needs ALPHA", f"{title} also needs BETA"]}
        return {"closed_book_answer": "Use the setting.",
                "sub_questions": [f"What is {title}?", "How to configure it?"]}
    docs = first_user.split("\nDocuments:\n")[1].split("\nReply with one JSON object")[0]
    judgments = []
    for i, text in enumerate(docs.split("[D")[1:]):
        supported = [n for n, marker in (("N1", "ALPHA"), ("N2", "BETA")) if marker in text]
        judgments.append({"doc": f"D{i + 1}", "reasoning": f"doc {i + 1} read",
                          "supported": supported})
    return {"judgments": judgments}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        body = json.dumps({
            "id": "golden", "object": "chat.completion", "model": request.get("model", "mock"),
            "choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant", "content": json.dumps(answer(request))}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
sys.stdout.close()
server.serve_forever()
