"""The miniature's `/metrics` (served with --enable-metrics, HTTP 404 without, as sglang 0.5.23).

The counters patchbench reads, with sglang's names, types and label sets (Prometheus text format):
finished requests and their prompt, cached and generated tokens (counted when a request ends, after
its last chunk was handed to the socket), aborted and retracted requests, decode forward passes by
whether they would replay a CUDA graph (device cuda, graphs on, batch <= --cuda-graph-max-bs), and
the inter-token latency histogram (sglang's default buckets) over the times each token was handed to
its socket. The miniature never retracts and has no prefix cache: those stay 0.
"""

from __future__ import annotations

ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060,
               0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000)


class MetricsCollector:
    def __init__(self, model_name: str, *, device: str, graph_max_bs: int, graphs: bool):
        self.labels = f'model_name="{model_name}",engine_type="unified",tp_rank="0",pp_rank="0"'
        self.graph_max_bs = graph_max_bs if graphs and device.startswith("cuda") else 0
        self.requests = self.prompt_tokens = self.generation_tokens = self.aborted = 0
        self.passes = {"decode_cuda_graph": 0, "decode_none": 0}
        self.itl_counts = [0] * (len(ITL_BUCKETS) + 1)
        self.itl_sum = 0.0

    def decode_pass(self, batch: int) -> None:
        self.passes["decode_cuda_graph" if 0 < batch <= self.graph_max_bs else "decode_none"] += 1

    def finished(self, prompt_tokens: int, completion_tokens: int, token_times: list, aborted: bool) -> None:
        self.requests += 1
        self.prompt_tokens += prompt_tokens
        self.generation_tokens += completion_tokens
        self.aborted += int(aborted)
        for a, b in zip(token_times, token_times[1:]):
            gap = max(0.0, b - a)
            self.itl_sum += gap
            i = next((k for k, le in enumerate(ITL_BUCKETS) if gap <= le), len(ITL_BUCKETS))
            self.itl_counts[i] += 1

    def render(self) -> str:
        lab = self.labels
        lines = []

        def counter(name, doc, rows):
            lines.append(f"# HELP {name}_total {doc}")
            lines.append(f"# TYPE {name}_total counter")
            lines.extend(f"{name}_total{{{lab}{extra}}} {float(v)}" for extra, v in rows)

        stream = ',is_streaming="true"'
        counter("sglang:num_requests", "Number of requests processed.", [(stream, self.requests)])
        counter("sglang:prompt_tokens", "Number of prefill tokens processed.", [(stream, self.prompt_tokens)])
        counter("sglang:generation_tokens", "Number of generation tokens processed.",
                [(stream, self.generation_tokens)])
        counter("sglang:num_aborted_requests", "Number of requests aborted.", [("", self.aborted)])
        counter("sglang:num_retracted_requests", "Total number of retracted requests.", [("", 0)])
        counter("sglang:cuda_graph_passes", "Total number of forward passes categorized by CUDA graph.",
                [(f',mode="{m}"', n) for m, n in self.passes.items()])
        name = "sglang:inter_token_latency_seconds"
        lines.append(f"# HELP {name} Histogram of inter-token latency in seconds.")
        lines.append(f"# TYPE {name} histogram")
        cum = 0
        for le, n in zip((*map(str, ITL_BUCKETS), "+Inf"), self.itl_counts):
            cum += n
            lines.append(f'{name}_bucket{{{lab},le="{le}"}} {float(cum)}')
        lines.append(f"{name}_count{{{lab}}} {float(cum)}")
        lines.append(f"{name}_sum{{{lab}}} {self.itl_sum}")
        return "\n".join(lines) + "\n"
