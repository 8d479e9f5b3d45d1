"""The miniature's OpenAI chat API, `POST /v1/chat/completions` (sglang's shapes): what chat clients
such as the sgl-eval harness send (they also read `GET /v1/models`).

The miniature has no chat template: the messages become one prompt, a "role: content" line each
(text parts of list contents joined; other parts are refused), then "assistant:". The answer comes
from the same generation path as /v1/completions. `max_tokens` (or `max_completion_tokens`) unset:
up to the context left, as sglang does (the miniature's EOS ends it sooner). Sampling fields
(temperature, top_p, seed, min_p, chat_template_kwargs, ...) are accepted and do not change the
miniature's deterministic words. Streaming: `chat.completion.chunk` SSE events, the role first,
then content deltas, the finish reason last; `stream_options.include_usage` adds a usage chunk.
"""

from __future__ import annotations

import time
import uuid

from sglang.srt.entrypoints.http_server import _DONE, BadRequest, _chunk, _sse, stream_flags, usage
from sglang.srt.managers.scheduler import Req


def messages_prompt(messages) -> str:
    """The prompt the miniature generates from for `messages`; ValueError when malformed."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' must be a non-empty list")
    lines = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ValueError("each message needs a 'role'")
        content = m.get("content") or ""
        if isinstance(content, list):
            if any(not isinstance(p, dict) or p.get("type") != "text" for p in content):
                raise ValueError("the miniature takes text content parts only")
            content = "".join(str(p.get("text", "")) for p in content)
        elif not isinstance(content, str):
            raise ValueError("a message's 'content' must be a string or a list of text parts")
        lines.append(f"{m['role']}: {content}")
    return "\n".join(lines) + "\nassistant:"


async def chat_completions(server, obj: dict, writer, keep_alive: bool) -> bool:
    """Serve one chat request (`obj`, the parsed body) on `server` (the HttpServer); loaded by it
    on the first chat request."""
    try:
        prompt = messages_prompt(obj.get("messages"))
    except ValueError as e:
        raise BadRequest(str(e))
    if int(obj.get("n") or 1) != 1:
        raise BadRequest("the miniature answers n=1 only")
    max_new = obj.get("max_completion_tokens") or obj.get("max_tokens")
    if max_new is None:
        max_new = max(1, (server.args.context_length or 4096) - len(prompt.split()) - 1)
    max_new = int(max_new)
    if max_new < 1:
        raise BadRequest("max_tokens must be >= 1")
    stream, include_usage, continuous_usage = stream_flags(obj)
    model = obj.get("model") or server.args.served_model_name
    rid = str(obj.get("rid") or uuid.uuid4().hex)
    created = int(time.time())
    cid = f"chatcmpl-{rid}"
    ignore_eos = bool(obj.get("ignore_eos", False))

    def event(delta: dict, finish, r: Req, with_usage: bool) -> bytes:
        return _sse({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
                    "usage": usage(r) if with_usage else None})

    if stream:
        sent = [-1]  # characters of req.text already sent (-1: not even the role yet)

        def sink(r: Req, finished: bool) -> bool:
            if writer.is_closing():
                return False
            data = event({"role": "assistant", "content": ""}, None, r, False) if sent[0] < 0 else b""
            sent[0] = max(sent[0], 0)
            delta = r.text[sent[0]:]
            sent[0] = len(r.text)
            fr = r.finish_reason["type"] if finished else None
            data += event({"content": delta}, fr, r, continuous_usage)
            if finished:
                if include_usage:
                    data += _sse({"id": cid, "object": "chat.completion.chunk", "created": created,
                                 "model": model, "choices": [], "usage": usage(r)})
                writer.write(_chunk(data + _DONE) + b"0\r\n\r\n")
            else:
                writer.write(_chunk(data))
            return True

        req = Req(rid, "chat", prompt, max_new, ignore_eos, sink)
        return await server._run(req, writer, keep_alive, stream=True)

    req = Req(rid, "chat", prompt, max_new, ignore_eos, None)
    keep = await server._run(req, writer, keep_alive, stream=False)
    if req.aborted:
        return False
    return server._send_json(writer, 200, {
        "id": cid, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": req.text,
                                             "reasoning_content": None, "tool_calls": None},
                     "logprobs": None, "finish_reason": req.finish_reason["type"],
                     "matched_stop": req.finish_reason.get("matched")}],
        "usage": usage(req)}, keep)
