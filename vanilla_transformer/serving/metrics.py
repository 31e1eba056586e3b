"""The server's Prometheus metrics (`GET /metrics`), in a registry of their own."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


class ServerMetrics:
    def __init__(self):
        self.registry = registry = CollectorRegistry()
        prefix = "vanilla_transformer_"
        self.requests = Counter(
            prefix + "requests",
            "HTTP requests answered, by endpoint and status",
            ["endpoint", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            prefix + "request_seconds",
            "Time to answer, by endpoint and status",
            ["endpoint", "status"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.queue_sentences = Gauge(prefix + "queue_sentences", "Sentences waiting for a batch", registry=registry)
        self.queue_tokens = Gauge(prefix + "queue_tokens", "Source tokens waiting for a batch", registry=registry)
        self.queue_requests = Gauge(
            prefix + "queue_requests", "Requests accepted and not yet answered", registry=registry
        )
        self.batch_sentences = Histogram(
            prefix + "batch_sentences", "Sentences in each batch", buckets=SIZE_BUCKETS, registry=registry
        )
        self.batch_tokens = Histogram(
            prefix + "batch_tokens", "Source tokens in each batch", buckets=SIZE_BUCKETS, registry=registry
        )
        self.queue_wait = Histogram(
            prefix + "queue_wait_seconds",
            "Time a sentence waited for its batch",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.engine_seconds = Counter(prefix + "engine_seconds", "Time spent translating batches", registry=registry)
        self.source_tokens = Counter(prefix + "source_tokens", "Source tokens translated", registry=registry)
        self.output_tokens = Counter(prefix + "output_tokens", "Tokens of the translations written", registry=registry)
        self.tokens_per_second = Gauge(
            prefix + "tokens_per_second", "Output tokens per second of the last batch's translation", registry=registry
        )

    def text(self) -> bytes:
        return generate_latest(self.registry)
