"""Benchmark the latency of running a single static batch without a server (miniature).

Same command line and JSONL rows as sglang's `python -m sglang.bench_one_batch`:

    python -m sglang.bench_one_batch --model-path P --batch-size 1 2 4 --input-len 128 \
        --output-len 32 --result-filename out.jsonl [--run-name X]

It accepts every server argument (ServerArgs) plus the benchmark arguments. For each
(batch_size, input_len, output_len) it runs one prefill and output_len - 1 decode steps, each taking
the time the cost model (sglang/srt/model_executor/cost.py) gives, paced on monotonic deadlines, and
times them with time.perf_counter() like sglang does. A warmup run at the first shape comes first.
Rows are appended to --result-filename: run_name, batch_size, input_len, output_len,
prefill_latency, prefill_throughput, median_decode_latency, median_decode_throughput,
total_latency, overall_throughput (sglang's names and nothing else, as sglang 0.5.23 writes them).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import logging
import statistics
import time
from typing import Optional, Tuple

from sglang.srt.model_executor import cost as cost_mod
from sglang.srt.server_args import ServerArgs


@dataclasses.dataclass
class BenchArgs:
    run_name: str = "default"
    batch_size: Tuple[int] = (1,)
    input_len: Tuple[int] = (1024,)
    output_len: Tuple[int] = (16,)
    prompt_filename: str = ""
    result_filename: str = "result.jsonl"
    correctness_test: bool = False
    cut_len: int = 4
    log_decode_step: int = 0
    profile: bool = False

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser):
        parser.add_argument("--run-name", type=str, default=BenchArgs.run_name)
        parser.add_argument("--batch-size", type=int, nargs="+", default=BenchArgs.batch_size)
        parser.add_argument("--input-len", type=int, nargs="+", default=BenchArgs.input_len)
        parser.add_argument("--output-len", type=int, nargs="+", default=BenchArgs.output_len)
        parser.add_argument("--prompt-filename", type=str, default=BenchArgs.prompt_filename)
        parser.add_argument("--result-filename", type=str, default=BenchArgs.result_filename)
        parser.add_argument("--correctness-test", action="store_true")
        parser.add_argument("--cut-len", type=int, default=BenchArgs.cut_len)
        parser.add_argument("--log-decode-step", type=int, default=BenchArgs.log_decode_step)
        parser.add_argument("--profile", action="store_true")

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace):
        attrs = [(attr.name, type(attr.default)) for attr in dataclasses.fields(cls)]
        return cls(**{attr: (getattr(args, attr) if getattr(args, attr) is None
                             else attr_type(getattr(args, attr))) for attr, attr_type in attrs})


CATCH_UP_S = 0.0005


def _sleep_until(deadline: float) -> None:
    while True:
        delay = deadline - time.perf_counter()
        if delay <= 0:
            return
        time.sleep(delay)


def latency_test_run_once(run_name: str, cm, batch_size: int, input_len: int, output_len: int,
                          log_decode_step: int, rank_print) -> Optional[dict]:
    results = {"run_name": run_name, "batch_size": batch_size, "input_len": input_len,
               "output_len": output_len}
    tot_latency = 0.0

    tic = time.perf_counter()
    _sleep_until(tic + cm.prefill_s(batch_size * input_len))
    prefill_latency = time.perf_counter() - tic
    tot_latency += prefill_latency
    throughput = input_len * batch_size / prefill_latency
    rank_print(f"Prefill. latency: {prefill_latency:6.5f} s, throughput: {throughput:9.2f} token/s")
    results["prefill_latency"] = prefill_latency
    results["prefill_throughput"] = throughput

    decode_latencies = []
    # Steps run back to back: step k ends at deadline_k = deadline_{k-1} + cost and is timed from
    # the end of step k-1, so the usual sleep overshoot (~0.1 ms) does not accumulate. A longer
    # stall (the host was busy) is not caught up with short steps: the schedule restarts.
    prev_end = deadline = time.perf_counter()
    for i in range(output_len - 1):
        deadline = max(deadline, prev_end - CATCH_UP_S) + cm.decode_step_s(batch_size)
        _sleep_until(deadline)
        now = time.perf_counter()
        latency = now - prev_end
        prev_end = now
        tot_latency += latency
        throughput = batch_size / latency
        decode_latencies.append(latency)
        if i < 5 or (log_decode_step > 0 and i % log_decode_step == 0):
            rank_print(f"Decode {i}. Batch size: {batch_size}, latency: {latency:6.5f} s, "
                       f"throughput: {throughput:9.2f} token/s")

    if output_len > 1:
        med = statistics.median(decode_latencies)
        med_tp = batch_size / med
        rank_print(f"Decode.  median latency: {med:6.5f} s, median throughput: {med_tp:9.2f} token/s")
        results["median_decode_latency"] = med
        results["median_decode_throughput"] = med_tp

    throughput = (input_len + output_len) * batch_size / tot_latency
    rank_print(f"Total. latency: {tot_latency:6.3f} s, throughput: {throughput:9.2f} token/s")
    results["total_latency"] = tot_latency
    results["overall_throughput"] = throughput
    return results


def latency_test(server_args: ServerArgs, bench_args: BenchArgs) -> list:
    rank_print = print
    cm = cost_mod.from_server_args(server_args)
    rank_print(f"max_total_num_tokens={1 << 20}")
    rank_print("Warmup ...")
    latency_test_run_once(bench_args.run_name, cm, bench_args.batch_size[0],
                          bench_args.input_len[0], min(32, bench_args.output_len[0]), 0,
                          lambda *a, **k: None)
    rank_print("Benchmark ...")
    result_list = []
    for bs, il, ol in itertools.product(bench_args.batch_size, bench_args.input_len,
                                        bench_args.output_len):
        ret = latency_test_run_once(bench_args.run_name, cm, bs, il, ol,
                                    bench_args.log_decode_step, rank_print)
        if ret is not None:
            result_list.append(ret)
    if bench_args.result_filename:
        with open(bench_args.result_filename, "a") as fout:
            for result in result_list:
                fout.write(json.dumps(result) + "\n")
    return result_list


def main(server_args: ServerArgs, bench_args: BenchArgs) -> None:
    if bench_args.correctness_test:
        raise SystemExit("--correctness-test is not supported by the miniature")
    latency_test(server_args, bench_args)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    BenchArgs.add_cli_args(parser)
    args = parser.parse_args()
    server_args = ServerArgs.from_cli_args(args)
    bench_args = BenchArgs.from_cli_args(args)
    logging.basicConfig(level=getattr(logging, server_args.log_level.upper()), format="%(message)s")
    main(server_args, bench_args)
