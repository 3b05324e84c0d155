"""The "ask the assistant" page: a durable run writes an answer word by word, the browser shows it as it comes.

``ask`` enqueues the run and redirects to its page; the page opens an
``EventSource`` on ``tokens``, which serves the run's stream as server-sent
events (``stream_response``). The browser reconnects by itself after a broken
connection and resumes after the last word it got (``Last-Event-ID``).
"""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.html import escape

from durable_django import enqueue, get_run
from durable_django.streams import stream_response

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Ask the shop</title></head>
<body>
<h1>Ask the shop</h1>
<p id="question">{question}</p>
<p id="answer" data-state="streaming"></p>
<script>
const answer = document.getElementById("answer");
const source = new EventSource("{tokens_url}");
source.onmessage = (event) => {{
  const word = document.createElement("span");
  word.className = "word";
  word.dataset.offset = event.lastEventId;
  word.textContent = JSON.parse(event.data) + " ";
  answer.appendChild(word);
}};
source.addEventListener("end", () => {{ source.close(); answer.dataset.state = "done"; }});
</script>
</body></html>
"""


def ask(request: HttpRequest) -> HttpResponse:
    """Start an answer (``?question=...&delay=...``) and show it."""
    question = request.GET.get("question", "When will my order arrive?")
    run = enqueue("shop.write_tokens", {"question": question, "delay": float(request.GET.get("delay", 0.15))})
    return redirect(f"/ask/{run.run_id}/")


def answer_page(request: HttpRequest, run_id: str) -> HttpResponse:
    run = get_run(run_id)
    if run is None or run.name != "shop.write_tokens":
        return HttpResponse("no such answer", status=404)
    return HttpResponse(PAGE.format(question=escape(run.input["question"]), tokens_url=f"/ask/{run_id}/tokens"))


def tokens(request: HttpRequest, run_id: str) -> HttpResponse:
    """The answer's words as server-sent events (this shop lets anyone read any answer)."""
    return stream_response(request, run_id, "tokens")
