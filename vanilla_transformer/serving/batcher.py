"""Dynamic batching across requests: one bounded queue of sentences, and one worker thread that takes a batch of
them at a time, by a token budget or after a short wait, and translates it.

A request's sentences enter the queue together (`submit`), or not at all; so do the pairs of a request to score
given translations (`submit` with `targets`), which share the queue, its limits and its deadlines. When the queue
would hold more than `max_queue_tokens` source tokens or `max_queue_requests` requests, `submit` raises `QueueFull`
at once, without touching the model. The worker waits for the first sentence, then until the waiting sentences of
the same search (the same number of hypotheses, with terms or without, or scoring) fill `max_batch_tokens`, or
`max_wait` seconds have passed since that first one arrived; it sorts the batch by length, translates (or scores)
it in one call, and hands each sentence's result to its request. A request whose deadline passed is `cancel`led: its
sentences still waiting are dropped from the queue."""

import collections
import concurrent.futures
import threading
import time
from dataclasses import dataclass, field


class QueueFull(Exception):
    """The queue is full: try again after `retry_after` seconds."""

    def __init__(self, retry_after: int, what: str):
        super().__init__(what)
        self.retry_after = retry_after


@dataclass(eq=False)
class Job:
    """One request's sentences, their lengths in tokens and the hypotheses asked for each; `future` receives the list
    of each sentence's translations (best first) once all are translated."""

    sentences: list[str]
    lengths: list[int]
    n_best: int
    terms: list[list[str]] | None = None  # each sentence's terms that its translation must contain
    targets: list[str] | None = None  # each sentence's given translation, to score instead of translating
    arrived: float = field(default_factory=time.monotonic)
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    results: list = field(default_factory=list)
    waiting: int = 0  # sentences not yet translated
    cancelled: bool = False  # its deadline passed: what is left of it is dropped
    answered: bool = False

    def __post_init__(self):
        self.results = [None] * len(self.sentences)
        self.waiting = len(self.sentences)


@dataclass(frozen=True, eq=False)
class Entry:
    """One sentence of a request in the queue: the `index`-th of its `job`."""

    job: Job
    index: int

    @property
    def sentence(self) -> str:
        return self.job.sentences[self.index]

    @property
    def length(self) -> int:
        """Its source tokens."""
        return self.job.lengths[self.index]

    @property
    def terms(self) -> list[str] | None:
        return None if self.job.terms is None else self.job.terms[self.index]

    @property
    def target(self) -> str | None:
        return None if self.job.targets is None else self.job.targets[self.index]

    @property
    def search(self) -> tuple[int, bool, bool]:
        """What a batch must share: the hypotheses asked for, whether the search has terms, and whether it
        scores."""
        return self.job.n_best, self.job.terms is not None, self.job.targets is not None


class Batcher:
    def __init__(self, engine, max_batch_tokens, max_wait, max_queue_tokens, max_queue_requests, metrics=None):
        """`engine.translate(sentences, n_best, terms)` gives each sentence's n_best translations, best first,
        `engine.score(sources, targets)` each pair's score, and `engine.count_tokens(texts)` each text's length in
        tokens."""
        self.engine = engine
        self.max_batch_tokens, self.max_wait = max_batch_tokens, max_wait
        self.max_queue_tokens, self.max_queue_requests = max_queue_tokens, max_queue_requests
        self.metrics = metrics
        self.condition = threading.Condition()
        self.pending: collections.deque[Entry] = collections.deque()  # oldest first
        self.queued_tokens = 0
        self.open_jobs = 0  # accepted and not yet answered
        self.tokens_per_second = None  # of the last batch: the queue's expected rate, for Retry-After
        self.stopping = False
        self.hurried = False  # no batch waits for more sentences: none will come
        self.worker = threading.Thread(target=self.run, name="translation-worker", daemon=True)

    def start(self) -> None:
        self.worker.start()

    def submit(self, sentences: list[str], lengths: list[int], n_best: int = 1, terms=None, targets=None) -> Job:
        """Queue a request's sentences (with their `terms`, if any; with `targets`, the pairs to score), or raise
        `QueueFull`."""
        job = Job(sentences, lengths, n_best, terms, targets)
        tokens = sum(lengths)
        with self.condition:
            if self.stopping:
                raise RuntimeError("the server is shutting down")
            refusal = self.refusal(tokens)
            if refusal is not None:
                raise refusal
            if not sentences:
                job.future.set_result([])
                return job
            self.pending.extend(Entry(job, i) for i in range(len(sentences)))
            self.queued_tokens += tokens
            self.open_jobs += 1
            self.update_gauges()
            self.condition.notify()
        return job

    def refusal(self, tokens: int = 1) -> QueueFull | None:
        """Why a request of `tokens` source tokens would be refused now: the queue holds its most requests, or the
        tokens would take it over its most tokens (a request alone in the queue is always taken). Before a request
        is read, its tokens are not known: at least 1."""
        if self.open_jobs >= self.max_queue_requests:
            return QueueFull(self.retry_after(), f"{self.open_jobs} requests are waiting (--max-queue-requests)")
        if self.queued_tokens and self.queued_tokens + tokens > self.max_queue_tokens:
            return QueueFull(self.retry_after(), f"{self.queued_tokens} tokens are waiting (--max-queue-tokens)")
        return None

    def cancel(self, job: Job) -> None:
        """Drop what is left of a request whose answer is no longer awaited."""
        with self.condition:
            if job.cancelled or job.answered:
                return
            job.cancelled = True
            self.queued_tokens -= sum(entry.length for entry in self.pending if entry.job is job)
            self.pending = collections.deque(entry for entry in self.pending if entry.job is not job)
            self.open_jobs -= 1
            self.update_gauges()
        job.future.cancel()

    def retry_after(self) -> int:
        """Seconds until the queue has room again, at the last batch's speed; at least 1."""
        rate = self.tokens_per_second or 0
        return max(1, round(self.queued_tokens / rate)) if rate else 1

    def hurry(self) -> None:
        """Translate what is queued without waiting for fuller batches (a drain: no new requests come)."""
        with self.condition:
            self.hurried = True
            self.condition.notify()

    def stop(self, timeout: float | None = None) -> bool:
        """Refuse new work, translate what is queued, and end the worker; whether it ended within `timeout`."""
        with self.condition:
            self.stopping = True
            self.condition.notify()
        self.worker.join(None if timeout is None else min(timeout, threading.TIMEOUT_MAX))
        return not self.worker.is_alive()

    def run(self) -> None:
        while True:
            batch = self.next_batch()
            if batch is None:
                return
            self.translate_batch(batch)

    def next_batch(self) -> list[Entry] | None:
        """The next batch: the oldest sentence and those of the same search after it, up to the token budget, once
        the budget is full or the oldest has waited `max_wait` (at once when hurried or stopping); None once stopping
        with nothing queued."""
        with self.condition:
            while True:
                if not self.pending:
                    if self.stopping:
                        return None
                    self.condition.wait()
                    continue
                first = self.pending[0]
                waited = time.monotonic() - first.job.arrived
                ready = [entry for entry in self.pending if entry.search == first.search]
                tokens = sum(entry.length for entry in ready)
                if tokens >= self.max_batch_tokens or waited >= self.max_wait or self.stopping or self.hurried:
                    break
                self.condition.wait(min(self.max_wait - waited, threading.TIMEOUT_MAX))  # a wait of years: no end
            batch, tokens = [], 0
            for entry in ready:
                if batch and tokens + entry.length > self.max_batch_tokens:
                    break
                batch.append(entry)
                tokens += entry.length
            taken = set(map(id, batch))
            self.pending = collections.deque(entry for entry in self.pending if id(entry) not in taken)
            self.queued_tokens -= tokens
            self.update_gauges()
        if self.metrics:
            self.metrics.batch_sentences.observe(len(batch))
            self.metrics.batch_tokens.observe(tokens)
            now = time.monotonic()
            for entry in batch:
                self.metrics.queue_wait.observe(now - entry.job.arrived)
        return batch

    def translate_batch(self, batch: list[Entry]) -> None:
        batch = sorted(batch, key=lambda entry: entry.length)  # similar lengths pad least
        sentences, first = [entry.sentence for entry in batch], batch[0].job
        terms = [entry.terms for entry in batch] if first.terms is not None else None
        start = time.perf_counter()
        try:
            if first.targets is not None:
                translations = self.engine.score(sentences, [entry.target for entry in batch])
            else:
                translations = self.engine.translate(sentences, first.n_best, terms)
        except Exception as error:  # the requests of the batch get the error; the worker goes on
            for job in {id(entry.job): entry.job for entry in batch}.values():
                self.finish(job, error=error)
            return
        seconds = time.perf_counter() - start
        self.record_speed(batch, translations, seconds)
        for entry, result in zip(batch, translations):
            entry.job.results[entry.index] = result
            entry.job.waiting -= 1
            if entry.job.waiting == 0:
                self.finish(entry.job)

    def record_speed(self, batch, translations, seconds: float) -> None:
        tokens = sum(entry.length for entry in batch)
        self.tokens_per_second = tokens / seconds if seconds > 0 else None
        if self.metrics:
            self.metrics.engine_seconds.inc(seconds)
            self.metrics.source_tokens.inc(tokens)
            written = sum(self.written_tokens(batch[0].job, translations))
            self.metrics.output_tokens.inc(written)
            if seconds > 0:
                self.metrics.tokens_per_second.set(written / seconds)

    def written_tokens(self, job: Job, results) -> list[int]:
        """The tokens of each result of a batch of `job`'s kind: a translation's best text, or a scored pair's
        target."""
        if job.targets is not None:
            return [len(pair.tokens) for pair in results]
        return self.engine.count_tokens([result[0].text for result in results])

    def finish(self, job: Job, error: Exception | None = None) -> None:
        with self.condition:
            if job.cancelled or job.answered:
                return
            job.answered = True
            self.open_jobs -= 1
            self.update_gauges()
        if job.future.set_running_or_notify_cancel():  # False: the awaiting side gave up first
            if error is None:
                job.future.set_result(job.results)
            else:
                job.future.set_exception(error)

    def update_gauges(self) -> None:
        if self.metrics:
            self.metrics.queue_sentences.set(len(self.pending))
            self.metrics.queue_tokens.set(self.queued_tokens)
            self.metrics.queue_requests.set(self.open_jobs)
