import sys, types, torch
from torch.profiler import profile, ProfilerActivity
from benchmarks import gpu_cpr_table as g
from kernels.models.config import load_model_config
a = types.SimpleNamespace(sequences=8, train_tokens=1024, prompt_len=1024, decode_batch=64, decode_steps=32)
layer = g.Layer(load_model_config("qwen3_5-wide-cut"), torch.device("cuda"), torch.bfloat16)
for name in ("fast_chunked", "consistent"):
    for _ in range(2): g.time_stage(layer, name, "trainer", a)
    rows = [t.requires_grad_() for t in layer.rows(a.sequences * a.train_tokens)]
    seg = g._segments(a.sequences, a.train_tokens, 0, "trainer_fwd")
    store = layer.store(pooled=False); w = torch.randn(rows[2].shape, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        out = layer.call(name, rows, seg, store); torch.cuda.synchronize()
        with torch.profiler.record_function("BACKWARD"):
            (out.float() * w).sum().backward(); torch.cuda.synchronize()
    print("=====", name)
    print(p.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=50))
