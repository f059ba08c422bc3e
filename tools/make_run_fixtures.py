"""Writes fixtures/runs/: launches of one model (Llama-3.1-8B, TP1, one 80 GB H100, SGLang v0.5.6 format)
with different --mem-fraction-static values; the numbers follow SGLang's budget formula, and the highest
value runs out of memory while capturing CUDA graphs. Run from the repo root."""
from __future__ import annotations

from pathlib import Path

OUT = Path("fixtures/runs")
P, W, BPT = 78.62, 14.99, 131072  # free before weights, weights GiB, bytes per token (32 layers x 8 kv heads x 128 x 2 x 2B)


def launch(mfs: float, idx: int, fail: bool) -> str:
    A = P - W
    kv = A - P * (1 - mfs)
    tokens = int(kv * 2**30 / BPT)
    kv = tokens * BPT / 2**30
    pool_end = A - kv - 0.16
    t = f"2025-12-0{idx + 1} 09:"
    L = [f"[{t}00:00] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', tokenizer_path='meta-llama/Llama-3.1-8B-Instruct', tokenizer_mode='auto', load_format='auto', trust_remote_code=False, dtype='auto', kv_cache_dtype='auto', quantization=None, context_length=None, device='cuda', host='127.0.0.1', port=30000, mem_fraction_static={mfs}, max_running_requests=None, max_total_tokens=None, chunked_prefill_size=8192, max_prefill_tokens=16384, schedule_policy='fcfs', tp_size=1, dp_size=1, pp_size=1, ep_size=1, random_seed={1000 + idx}, attention_backend='fa3', disable_cuda_graph=False, cuda_graph_max_bs=256, enable_torch_compile=False, disable_custom_all_reduce=False)",
         f"[{t}00:04] Init torch distributed begin.",
         f"[{t}00:05] Init torch distributed ends. mem usage=0.00 GB",
         f"[{t}00:05] Load weight begin. avail mem={P:.2f} GB",
         "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:03<00:00,  1.12it/s]",
         f"[{t}00:09] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem={A:.2f} GB, mem usage={W:.2f} GB.",
         f"[{t}00:09] KV Cache is allocated. #tokens: {tokens}, K size: {kv / 2:.2f} GB, V size: {kv / 2:.2f} GB",
         f"[{t}00:09] Memory pool end. avail mem={pool_end:.2f} GB",
         f"[{t}00:10] Capture cuda graph begin. This can take up to several minutes. avail mem={pool_end - 0.1:.2f} GB",
         f"[{t}00:10] Capture cuda graph bs [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136, 144, 152, 160, 168, 176, 184, 192, 200, 208, 216, 224, 232, 240, 248, 256]"]
    if fail:
        L += [f"Capturing batches (bs=256 avail_mem={pool_end - 0.1:.2f} GB):   0%|          | 0/36 [00:00<?, ?it/s]",
              f"[{t}00:11] Scheduler hit an exception: Traceback (most recent call last):",
              '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 389, in __init__',
              "    self.capture()",
              '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 497, in capture',
              "    ) = self.capture_one_batch_size(bs, forward)",
              "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 612.88 MiB is free. Including non-PyTorch memory, this process has 78.58 GiB memory in use. Of the allocated memory 76.02 GiB is allocated by PyTorch, and 1.05 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
              "",
              "During handling of the above exception, another exception occurred:",
              "",
              "Traceback (most recent call last):",
              '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2337, in run_scheduler_process',
              "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)",
              '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 391, in __init__',
              "    raise Exception(",
              "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 612.88 MiB is free.",
              "Possible solutions:",
              "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
              "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)",
              "3. disable torch compile by not using --enable-torch-compile",
              "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)",
              "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose ",
              "",
              f"[{t}00:11] Received sigquit from a child process. It usually means the child failed."]
        return "\n".join(L) + "\n"
    end = pool_end - 0.1 - 0.62
    L += [f"Capturing batches (bs=1 avail_mem={end:.2f} GB): 100%|██████████| 36/36 [00:06<00:00,  5.71it/s]",
          f"[{t}00:16] Capture cuda graph end. Time elapsed: 6.31 s. mem usage=0.62 GB. avail mem={end:.2f} GB.",
          f"[{t}00:17] max_total_num_tokens={tokens}, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=2048, context_len=131072, available_gpu_mem={end:.2f} GB",
          f"[{t}00:17] INFO:     Started server process [{3000 + idx}]",
          f"[{t}00:17] INFO:     Waiting for application startup.",
          f"[{t}00:17] INFO:     Application startup complete.",
          f"[{t}00:17] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)",
          f'[{t}00:18] INFO:     127.0.0.1:40000 - "GET /get_model_info HTTP/1.1" 200 OK',
          f"[{t}00:18] Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0, ",
          f'[{t}00:19] INFO:     127.0.0.1:40002 - "POST /generate HTTP/1.1" 200 OK',
          f"[{t}00:19] The server is fired up and ready to roll!"]
    for i in range(6):
        L.append(f"[{t}01:{i * 8:02d}] Decode batch, #running-req: {32 + i}, #token: {21000 + 900 * i}, token usage: "
                 f"{(21000 + 900 * i) / tokens:.2f}, cuda graph: True, gen throughput (token/s): {2900 + 17 * i + idx:.2f}, #queue-req: 0, ")
    return "\n".join(L) + "\n"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for idx, (mfs, fail) in enumerate([(0.80, False), (0.85, False), (0.88, False), (0.88, False), (0.90, False), (0.95, True)]):
        (OUT / f"llama8b-mfs{mfs:.2f}-{idx}.log").write_text(launch(mfs, idx, fail))


if __name__ == "__main__":
    main()
