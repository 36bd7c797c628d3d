#!/usr/bin/env python3
"""Scaling model of dtrain's data-parallel training (docs/scaling.md): an alpha-beta cost model
of ring collectives, a two-stream schedule of compute and communication (so that communication
overlaps backward as dt_ddp's buckets do), fed with figures measured on the project's 2-core VM.

    python3 docs/scaling_model.py            # every table of docs/scaling.md, as Markdown
    python3 docs/scaling_model.py --check    # only the self-checks (parameter counts etc.)

Plain Python 3 (3.8+), no third-party packages. Every input is a named constant below, with its
source; change one and rerun to see how the predictions move.
"""
import math
import statistics
import sys

GB = 1e9
MiB = 1 << 20

# ---- Measured on the project's VM (2 cores, AMD Zen 5, AVX-512 + bf16) -------------------------
# bench/RESULTS.md, whole-model table (`bash bench/bench_models.sh build`, commit a5bcf13, after
# batchnorm was fused with the ReLU and residual add): ResNet-152, stock stem, 3x32x32, batch 32,
# SGD, 2 threads: 125.0 img/s = 256 ms per step.
RESNET_IMG_S = 125.0
RESNET_BATCH = 32
# `dtrain plan examples/resnet152.yaml model.small_stem=false`: 58,164,298 parameters.
RESNET_PARAMS_PLAN = 58_164_298
# bench/RESULTS.md: Llama 56M (dim 512, 8 layers, 8 heads / 4 KV, FFN 1408, vocab 32000, seq 256,
# batch 8), AdamW, 2 threads: 1510 tok/s -- dtrain's end-to-end training FLOP rate on this VM.
LLAMA56M_TOK_S = 1510
# `dtrain plan examples/llama3.1-8b-lora.yaml -n N`: 8,043,892,736 parameters, 13,631,488 trainable
# (LoRA r=16 on q,k,v,o), 8,030,261,248 frozen (bf16: the base model).
LLAMA8B_TOTAL_PLAN = 8_043_892_736
LLAMA8B_TRAINABLE_PLAN = 13_631_488
# All-reduce bus bandwidth of 2 ranks (1 thread each), raw MPI_Allreduce at 32-256 MiB (what
# dt_comm's default "native" algorithm runs; our "ring" reached 5.5-5.7 and 4.2-4.3 GB/s):
#   bash bench/bench_comm.sh build                 -- one host, Open MPI shared memory: 4.7-5.1
#   sh tests/dist/netns/bench_netns.sh mpirun build/bench/bench_comm
#                                                  -- two network namespaces, TCP over a veth
#                                                     pair, MTU 65535: 2.45-2.6 (an earlier
#                                                     measurement: 1.3)
SHM_BUS_BW = 4.9 * GB
VETH_BUS_BW = 2.5 * GB
DESIGN_VETH_BUS_BW = 1.3 * GB
# The same runs' DDP step (bench_comm: MLP 6 x 1024x1024 + 1024x10, batch 64 per rank, SGD, 4 MiB
# buckets, 2 ranks on the VM's 2 cores): step, time waiting after backward, time the
# communication thread spent in all-reduces, in ms, with overlap on and off.
BENCH_DDP = {
    "shared memory": {"bw": SHM_BUS_BW, "alpha": 5e-6, "on": (21.9, 6.0, 11.8), "off": (21.6, 6.0, 5.8)},
    "veth": {"bw": VETH_BUS_BW, "alpha": 30e-6, "on": (23.4, 7.6, 13.3), "off": (22.8, 7.6, 7.5)},
}
# Measured on the VM: memory bandwidth, 2 threads (the optimizer step is memory-bound).
VM_MEM_BW = 40 * GB  # between the measured 27 (1 thread) and 54 (2 threads) GB/s

# Measured on the VM: disk, sequential write with fsync.
DISK_WRITE_BW = 0.6 * GB
# examples/resnet152.yaml: a checkpoint every 30 minutes; examples/llama3.1-8b-lora.yaml: every
# 200 steps.
RESNET_CKPT_EVERY_S = 30 * 60
LLAMA_CKPT_EVERY_STEPS = 200

# ---- Assumptions (the ones a real cluster has to confirm are listed in docs/scaling.md) -------
BUCKET_BYTES = 25 * MiB  # dt_ddp's default bucket (dist.bucket_mb = 25)
LINK_EFFICIENCY = 0.8  # all-reduce bus bandwidth reached, as a fraction of the line rate
LINKS = [  # name, line rate (bytes/s), alpha: latency per ring step (s)
    ("25 Gbit/s", 25e9 / 8, 25e-6),
    ("100 Gbit/s", 100e9 / 8, 10e-6),
    ("400 Gbit/s", 400e9 / 8, 5e-6),
]
VETH_ALPHA = BENCH_DDP["veth"]["alpha"]  # TCP through the kernel (assumed)
WORKERS = [2, 4, 8, 16, 32, 64, 128, 256]
# A faster worker than our VM, to show where the network starts to matter: a datacenter GPU
# (HBM about 2 TB/s) sustaining about 100x our VM's rate on the small-image ResNet-152 and
# 400 TFLOP/s in bf16 on the 8B Llama (about 40% of an H100-class dense bf16 peak).
FAST_RESNET_SPEEDUP = 100.0
FAST_LLAMA_FLOPS = 400e12
FAST_MEM_BW = 2000 * GB


# ---- Collectives: ring algorithms, alpha-beta cost ---------------------------------------------
# Latency steps of a collective: "ring" (Open MPI's large-message all-reduce, our DT_COMM_ALGO
# ring) takes n-1 steps per phase; "log" stands for tree / recursive-halving / hierarchical
# algorithms (NCCL's trees, a per-node stage first), about log2(n) steps per phase.
LATENCY_MODEL = "ring"


def steps(n):
    return n - 1 if LATENCY_MODEL == "ring" else math.ceil(math.log2(n))


def t_allreduce(nbytes, n, bw, alpha):
    """All-reduce of nbytes over n workers as reduce-scatter + all-gather:
    2(n-1)/n * nbytes / bw + 2(n-1) * alpha (ring)."""
    if n < 2 or nbytes <= 0:
        return 0.0
    return 2 * (n - 1) / n * nbytes / bw + 2 * steps(n) * alpha


def t_reduce_scatter(nbytes, n, bw, alpha):
    """nbytes is the full (padded) buffer; every worker ends with its 1/n shard summed:
    (n-1)/n * nbytes / bw + (n-1) * alpha."""
    if n < 2 or nbytes <= 0:
        return 0.0
    return (n - 1) / n * nbytes / bw + steps(n) * alpha


t_allgather = t_reduce_scatter  # the same traffic in the other direction


# ---- Models: per-group compute and bytes --------------------------------------------------------
class Group:
    """A contiguous piece of the model that backward finishes at once (a ResNet block, a decoder
    layer): forward and backward FLOPs per sample, bytes of trainable gradients, bytes of the
    parameters a ZeRO-3 worker must gather to run it."""

    def __init__(self, name, fwd_flops, bwd_flops, grad_bytes, param_bytes):
        self.name, self.fwd_flops, self.bwd_flops = name, fwd_flops, bwd_flops
        self.grad_bytes, self.param_bytes = grad_bytes, param_bytes


def resnet152_groups(image=32, classes=10):
    """ResNet-152 with the stock stem (torchvision v1.5: stride on the 3x3 conv) on image x image:
    one group per bottleneck block, plus stem and head. FLOPs = 2 x multiply-adds; backward = 2 x
    forward (gradients of inputs and of weights). Returns (groups, parameter count)."""
    groups, params = [], 0

    def conv(cin, cout, k, hw_out):
        return 2 * cin * cout * k * k * hw_out * hw_out, cin * cout * k * k

    hw = image // 2  # 7x7 stride-2 stem conv
    f, p = conv(3, 64, 7, hw)
    p += 2 * 64  # batchnorm weight + bias
    groups.append(Group("stem", f, 2 * f, 4 * p, 4 * p))
    params += p
    hw = (hw + 1) // 2  # 3x3 stride-2 max pool
    cin = 64
    for stage, (width, blocks) in enumerate([(64, 3), (128, 8), (256, 36), (512, 3)]):
        for b in range(blocks):
            stride = 2 if (b == 0 and stage > 0) else 1
            out_hw = (hw + stride - 1) // stride
            f1, p1 = conv(cin, width, 1, hw)
            f2, p2 = conv(width, width, 3, out_hw)
            f3, p3 = conv(width, 4 * width, 1, out_hw)
            f, p = f1 + f2 + f3, p1 + p2 + p3 + 2 * (2 * width + 4 * width)
            if b == 0:
                fd, pd = conv(cin, 4 * width, 1, out_hw)
                f, p = f + fd, p + pd + 2 * 4 * width
            groups.append(Group(f"layer{stage + 1}.{b}", f, 2 * f, 4 * p, 4 * p))
            params += p
            cin, hw = 4 * width, out_hw
    p = cin * classes + classes
    groups.append(Group("fc", 2 * cin * classes, 4 * cin * classes, 4 * p, 4 * p))
    params += p
    return groups, params


def llama_layer_params(d, layers, heads, kv, ffn, vocab, tied):
    """Matmul parameters per decoder layer, embedding and lm_head sizes, total parameters."""
    hd = d // heads
    per_layer = d * (d + 2 * kv * hd) + d * d + 3 * d * ffn
    norms = 2 * d
    emb = vocab * d
    total = layers * (per_layer + norms) + emb + (0 if tied else emb) + d
    return per_layer, emb, total


def llama56m_flop_rate():
    """dtrain's measured end-to-end training rate on the Llama 56M (f32, AdamW): 6 FLOPs per
    matmul parameter per token (forward 2, backward 4) plus attention (causal: forward 2 x seq x
    dim per layer per token, backward twice that)."""
    d, layers, seq = 512, 8, 256
    per_layer, emb, _ = llama_layer_params(d, layers, 8, 4, 1408, 32000, tied=False)
    matmul = layers * per_layer + emb  # lm_head is a matmul, the embedding a lookup
    flops_per_token = 6 * matmul + 3 * 2 * seq * d * layers
    return flops_per_token * LLAMA56M_TOK_S


def llama8b_lora_groups(seq=2048, rank=16):
    """Llama-3.1-8B with LoRA r=16 on q,k,v,o, bf16 frozen base, recompute on (the config of
    examples/llama3.1-8b-lora.yaml): per token, a decoder layer costs forward 2P + attention A,
    and in backward a recomputed forward (2P + A) plus the input gradients (2P + 2A); the frozen
    weights get no gradient (no 2P for weight gradients). LoRA adds 2 (forward) + 4 (backward)
    FLOPs per adapter parameter. One group per decoder layer, plus embedding and head."""
    d, layers, heads, kv, ffn, vocab = 4096, 32, 32, 8, 14336, 128256
    per_layer, emb, total = llama_layer_params(d, layers, heads, kv, ffn, vocab, tied=False)
    hd = d // heads
    lora = rank * ((d + d) + 2 * (d + kv * hd) + (d + d))  # q, k, v, o: r x (in + out)
    attn = 2 * seq * d  # causal attention FLOPs per token per layer, forward
    groups = [Group("embed", 0, 0, 0, 2 * emb)]
    for i in range(layers):
        fwd = 2 * per_layer + attn + 2 * lora
        bwd = (2 * per_layer + attn) + (2 * per_layer + 2 * attn) + 4 * lora
        groups.append(Group(f"layer{i}", fwd, bwd, 4 * lora, 2 * (per_layer + 2 * d)))
    groups.append(Group("lm_head", 2 * emb, 2 * emb, 0, 2 * (emb + d)))
    return groups, total, layers * lora


# ---- The two-stream schedule ----------------------------------------------------------------------
def schedule(compute, comm):
    """compute: [(seconds, needs)], needs = index of a comm op that must have finished first (or
    None); comm: [(seconds, after)], after = index of a compute op that must have finished first
    (or None). Each stream runs its ops in list order, one at a time (dt_ddp has one
    communication thread). Returns the time both streams are done."""
    c_end, m_end = [0.0] * len(compute), [0.0] * len(comm)
    ci = mi = 0
    while ci < len(compute) or mi < len(comm):
        progress = False
        if ci < len(compute):
            dur, needs = compute[ci]
            if needs is None or needs < mi:
                start = max(c_end[ci - 1] if ci else 0.0, m_end[needs] if needs is not None else 0.0)
                c_end[ci] = start + dur
                ci, progress = ci + 1, True
        if mi < len(comm):
            dur, after = comm[mi]
            if after is None or after < ci:
                start = max(m_end[mi - 1] if mi else 0.0, c_end[after] if after is not None else 0.0)
                m_end[mi] = start + dur
                mi, progress = mi + 1, True
        if not progress:
            raise RuntimeError("schedule: circular dependency")
    return max(c_end[-1] if c_end else 0.0, m_end[-1] if m_end else 0.0)


def buckets(groups, size, key):
    """Groups in backward order cut into buckets of about `size` bytes (dt_ddp: reverse layer
    order, whole parameters; here whole groups). Returns [(bytes, index of the last group)]."""
    out, acc = [], 0
    for i in reversed(range(len(groups))):
        acc += key(groups[i])
        if acc >= size or i == 0:
            if acc > 0:
                out.append((acc, i))
            acc = 0
    return out


class Worker:
    def __init__(self, flops, mem_bw):
        self.flops, self.mem_bw = flops, mem_bw


def units(groups, size, key):
    """Groups in forward order cut into pieces of about `size` bytes that ZeRO gathers at once:
    [(first group, last group, bytes by key, gradient bytes)]; every group is in one piece."""
    out, first, acc, gacc = [], 0, 0, 0
    for i, g in enumerate(groups):
        acc, gacc = acc + key(g), gacc + g.grad_bytes
        if acc >= size or i == len(groups) - 1:
            out.append((first, i, acc, gacc))
            first, acc, gacc = i + 1, 0, 0
    return out


def micro_step_time(groups, samples, worker, n, link, stage=0, comm_on=True, overlap=True,
                    opt_s=0.0, gather_frozen=False, bucket=BUCKET_BYTES, ag_prefetch=False):
    """One forward + backward (+ the optimizer when opt_s > 0) on one of n workers, with the
    communication of a ZeRO stage:
      0     gradients all-reduced in buckets as backward finishes them (overlap) or after it;
      1, 2  gradients reduce-scattered in buckets, the optimizer on the 1/n shard, then the
            updated parameters all-gathered: after the optimizer (exposed), or with ag_prefetch
            piece by piece ahead of the next forward (as stage 3 does);
      3     parameters all-gathered before each piece's forward and again before its backward
            (freed in between), prefetching one piece ahead; gradients reduce-scattered.
    gather_frozen: stage 3 also shards frozen parameters (a LoRA base). Returns seconds."""
    bw, alpha = link
    L = len(groups)
    fwd = [g.fwd_flops * samples / worker.flops for g in groups]
    bwd = [g.bwd_flops * samples / worker.flops for g in groups]
    comm_on = comm_on and n > 1

    def cost(coll, nbytes):
        return coll(nbytes, n, bw, alpha) if comm_on else 0.0

    def bwd_at(i):  # compute index of group i's backward
        return L + (L - 1 - i)

    compute, comm, fwd_needs, bwd_needs = [], [], {}, {}
    pieces = units(groups, bucket, (lambda g: g.param_bytes) if gather_frozen else (lambda g: g.grad_bytes))
    if comm_on and (stage == 3 or (stage in (1, 2) and ag_prefetch and opt_s > 0)):
        for u, (first, last, pbytes, _) in enumerate(pieces):
            fwd_needs[first] = len(comm)  # may start once the forward of piece u-2 is done
            comm.append((cost(t_allgather, pbytes), pieces[u - 2][1] if u >= 2 else None))
    for i in range(L):
        compute.append((fwd[i], fwd_needs.get(i)))
    if comm_on and stage == 3:
        U = len(pieces)
        for u in reversed(range(U)):
            first, last, pbytes, _ = pieces[u]
            bwd_needs[last] = len(comm)  # once forward, or the backward of piece u+2, is done
            comm.append((cost(t_allgather, pbytes), L - 1 if u >= U - 2 else bwd_at(pieces[u + 2][0])))
            if u + 1 < U:
                comm.append((cost(t_reduce_scatter, pieces[u + 1][3]), bwd_at(pieces[u + 1][0])))
        comm.append((cost(t_reduce_scatter, pieces[0][3]), bwd_at(pieces[0][0])))
    elif comm_on:
        coll = t_allreduce if stage == 0 else t_reduce_scatter
        for nbytes, last in buckets(groups, bucket, lambda g: g.grad_bytes):
            comm.append((cost(coll, nbytes), bwd_at(last) if overlap else 2 * L - 1))
    for i in reversed(range(L)):
        compute.append((bwd[i], bwd_needs.get(i)))
    if opt_s > 0:
        compute.append((opt_s / n if stage >= 1 else opt_s, len(comm) - 1 if comm else None))
        if comm_on and stage in (1, 2) and not ag_prefetch:
            comm.append((cost(t_allgather, sum(g.grad_bytes for g in groups)), len(compute) - 1))
    return schedule(compute, comm)


# ---- The two workloads -----------------------------------------------------------------------------
class Workload:
    pass


def resnet_workload(speedup=1.0, mem_bw=VM_MEM_BW, batch=RESNET_BATCH):
    """ResNet-152 on 32x32 images with `batch` images per worker (compute scales linearly from the
    measured batch 32) on a worker `speedup` times our VM."""
    groups, params = resnet152_groups()
    w = Workload()
    w.name, w.groups, w.samples, w.accum = "ResNet-152", groups, batch, 1
    w.params = params
    step = RESNET_BATCH / RESNET_IMG_S
    # SGD with momentum reads p, g, m and writes p, m: 20 bytes per parameter, memory-bound.
    w.opt_s = 20 * params / mem_bw
    vm_opt = 20 * params / VM_MEM_BW
    flops = sum(g.fwd_flops + g.bwd_flops for g in groups) * RESNET_BATCH
    vm_rate = flops / (step - vm_opt)  # the measured step, less the optimizer
    w.worker = Worker(vm_rate * speedup, mem_bw)
    w.rate_vm = vm_rate
    w.fwd_gflop_per_img = sum(g.fwd_flops for g in groups) / 1e9
    return w


def llama_workload(flops=None, mem_bw=VM_MEM_BW):
    groups, total, trainable = llama8b_lora_groups()
    w = Workload()
    w.name, w.groups, w.samples, w.accum = "Llama-3.1-8B LoRA", groups, 2048, 8
    w.params, w.trainable = total + trainable, trainable
    w.worker = Worker(flops or llama56m_flop_rate(), mem_bw)
    w.opt_s = 28 * trainable / mem_bw  # AdamW: p, g, m, v read, p, m, v written
    return w


def step_time(w, n, link, stage=0, overlap=True, gather_frozen=False, bucket=BUCKET_BYTES,
              ag_prefetch=False):
    """An optimizer step of w.accum micro-steps: stages 0 and 1 communicate on the last only;
    stage 2 reduce-scatters every micro-step (a worker keeps only its gradient shard); stage 3
    also gathers parameters every micro-step."""
    t = 0.0
    for m in range(w.accum):
        last = m == w.accum - 1
        comm_on = last or stage >= 2
        t += micro_step_time(w.groups, w.samples, w.worker, n, link, stage, comm_on=comm_on,
                             overlap=overlap, opt_s=w.opt_s if last else 0.0,
                             gather_frozen=gather_frozen, bucket=bucket, ag_prefetch=ag_prefetch)
    return t


def efficiency(w, n, link, **kw):
    """Weak scaling: the per-worker batch is fixed, so efficiency = T(1 worker) / T(n workers)."""
    return step_time(w, 1, link, stage=0) / step_time(w, n, link, **kw)


def straggler_factor(n, cv):
    """Expected slowest of n workers whose step times are normal with coefficient of variation cv
    (Blom's approximation of the expected maximum of n standard normals)."""
    if n < 2 or cv <= 0:
        return 1.0
    z = statistics.NormalDist().inv_cdf((n - 0.375) / (n + 0.25))
    return 1.0 + cv * z


# ---- Output ----------------------------------------------------------------------------------------------
def link_params(name_rate_alpha):
    name, rate, alpha = name_rate_alpha
    return name, (rate * LINK_EFFICIENCY, alpha)


ALL_LINKS = [link_params(l) for l in LINKS]  # 25, 100, 400 Gbit/s
VETH = ("veth, measured", (VETH_BUS_BW, VETH_ALPHA))
VETH_DESIGN = ("veth, 1.3 GB/s (earlier measurement)", (DESIGN_VETH_BUS_BW, VETH_ALPHA))


def pct(x):
    return f"{100 * x:.0f}%" if x < 0.995 else f"{100 * x:.1f}%"


def table(title, header, rows):
    print(f"\n**{title}**\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(r) + " |")


def links_table(title, w, links=None, **kw):
    links = links or ALL_LINKS
    rows = []
    for n in WORKERS:
        rows.append([str(n)] + [pct(efficiency(w, n, l, **kw)) for _, l in links])
    table(title, ["workers"] + [name for name, _ in links], rows)


STAGES = [  # column title, keyword arguments of step_time
    ("DDP (ZeRO-0)", {"stage": 0}),
    ("ZeRO-1/2, all-gather after the step", {"stage": 2}),
    ("ZeRO-1/2, all-gather ahead of forward", {"stage": 2, "ag_prefetch": True}),
    ("ZeRO-3", {"stage": 3}),
]


def stages_table(title, w, link):
    rows = []
    for n in WORKERS:
        rows.append([str(n)] + [pct(efficiency(w, n, link, **kw)) for _, kw in STAGES])
    table(title, ["workers"] + [name for name, _ in STAGES], rows)


def checks():
    groups, params = resnet152_groups()
    assert params == RESNET_PARAMS_PLAN, (params, RESNET_PARAMS_PLAN)
    _, total, trainable = llama8b_lora_groups()
    assert total + trainable == LLAMA8B_TOTAL_PLAN, (total + trainable, LLAMA8B_TOTAL_PLAN)
    assert trainable == LLAMA8B_TRAINABLE_PLAN, (trainable, LLAMA8B_TRAINABLE_PLAN)
    # The schedule: no communication -> the sum of compute; overlap off -> compute + comm.
    g = [Group("a", 1e9, 2e9, 100 * MiB, 100 * MiB)]
    wk = Worker(1e9, VM_MEM_BW)
    link = (1 * GB, 0.0)
    assert abs(micro_step_time(g, 1, wk, 1, link, 0) - 3.0) < 1e-9
    ar = t_allreduce(100 * MiB, 2, 1 * GB, 0.0)
    assert abs(micro_step_time(g, 1, wk, 2, link, 0, overlap=False) - (3.0 + ar)) < 1e-9
    print("checks: parameter counts match `dtrain plan`; schedule sanity ok")


def bucket_ready_fractions(w):
    """For each DDP bucket, the share of backward done when its last gradient is ready."""
    L = len(w.groups)
    bwd = [g.bwd_flops for g in w.groups]
    total = sum(bwd)
    return [sum(bwd[i:]) / total for _, i in buckets(w.groups, BUCKET_BYTES, lambda g: g.grad_bytes)]


def sensitivity(r, rf):
    global LATENCY_MODEL
    base = ALL_LINKS[1][1]
    rows = []
    for label, wl, lk, kw, cv, lat in [
        ("the model as above", r, base, {}, 0.0, "ring"),
        ("alpha x5 (50 us: TCP stacks, a congested fabric)", r, (base[0], 5 * base[1]), {}, 0.0, "ring"),
        ("alpha x5, log-depth latency (tree / hierarchical)", r, (base[0], 5 * base[1]), {}, 0.0, "log"),
        ("bandwidth / 2 (contention, oversubscribed fabric)", r, (base[0] / 2, base[1]), {}, 0.0, "ring"),
        ("bandwidth / 4", r, (base[0] / 4, base[1]), {}, 0.0, "ring"),
        ("overlap off", r, base, {"overlap": False}, 0.0, "ring"),
        ("buckets 100 MiB", r, base, {"bucket": 100 * MiB}, 0.0, "ring"),
        ("buckets 4 MiB", r, base, {"bucket": 4 * MiB}, 0.0, "ring"),
        ("buckets 4 MiB, log-depth latency", r, base, {"bucket": 4 * MiB}, 0.0, "log"),
        ("stragglers: step time cv 2%", r, base, {}, 0.02, "ring"),
        ("stragglers: step time cv 5%", r, base, {}, 0.05, "ring"),
        (f"{FAST_RESNET_SPEEDUP:.0f}x faster workers, batch 256", rf, base, {}, 0.0, "ring"),
        (f"{FAST_RESNET_SPEEDUP:.0f}x faster workers, batch 256, 400 Gbit/s", rf, ALL_LINKS[2][1], {}, 0.0, "ring"),
    ]:
        LATENCY_MODEL = lat
        t1 = step_time(wl, 1, lk)
        tn = step_time(wl, 256, lk, **kw) + t1 * (straggler_factor(256, cv) - 1)
        rows.append([label, f"{1e3 * t1:.0f}", f"{1e3 * tn:.0f}", pct(t1 / tn)])
    LATENCY_MODEL = "ring"
    table("ResNet-152 DDP, 100 Gbit/s, 256 workers: one assumption changed at a time",
          ["variant", "step, 1 worker (ms)", "step, 256 workers (ms)", "efficiency"], rows)


def main():
    checks()
    if "--check" in sys.argv:
        return
    r = resnet_workload()
    l = llama_workload()
    grad_mb = sum(g.grad_bytes for g in r.groups) / 1e6
    fr = bucket_ready_fractions(r)
    print("\n### Inputs as the script derives them\n")
    print(f"- ResNet-152 (stock stem, 32x32): {r.params:,} parameters, {grad_mb:.1f} MB of f32 "
          f"gradients in {len(fr)} buckets of 25 MiB; forward {r.fwd_gflop_per_img:.3f} "
          f"GFLOP/image, training 3x that; the measured step ({1e3 * RESNET_BATCH / RESNET_IMG_S:.0f}"
          f" ms for {RESNET_BATCH} images) less the optimizer ({1e3 * r.opt_s:.0f} ms, memory-bound) gives "
          f"{r.rate_vm / 1e9:.0f} GFLOP/s. Backward finishes the first bucket after "
          f"{100 * fr[0]:.0f}% of its work and the last at {100 * fr[-1]:.0f}%: "
          f"{100 * (1 - fr[0]):.0f}% of backward can hide communication.")
    lg = sum(g.fwd_flops + g.bwd_flops for g in l.groups)
    fl = bucket_ready_fractions(l)
    print(f"- Llama-3.1-8B LoRA: {l.params:,} parameters, {l.trainable:,} trainable "
          f"({4 * l.trainable / 1e6:.1f} MB of f32 gradients, {len(fl)} buckets); "
          f"{lg / 1e9:.1f} GFLOP per token (forward, recomputed forward, input gradients); at "
          f"{l.worker.flops / 1e9:.0f} GFLOP/s (dtrain's measured Llama 56M training rate) an "
          f"optimizer step of 8 x 2048 tokens takes {step_time(l, 1, ALL_LINKS[0][1]):.0f} s.")
    for name, (bw, alpha) in ALL_LINKS + [VETH]:
        ar = t_allreduce(4 * r.params, 256, bw, alpha)
        print(f"- {name}: all-reduce bus bandwidth {bw / 1e9:.2f} GB/s, alpha {alpha * 1e6:.0f} us;"
              f" ResNet-152's gradients over 256 workers in {1e3 * ar:.0f} ms")

    print(f"\n### ResNet-152, workers like our VM ({1e3 * RESNET_BATCH / RESNET_IMG_S:.0f} ms per step "
          f"of {RESNET_BATCH} images)")
    links_table("DDP (ZeRO-0), overlap on, 25 MiB buckets", r)
    links_table("DDP, overlap off (every bucket after backward)", r, overlap=False)
    stages_table("ZeRO stages at 25 Gbit/s, overlap on", r, ALL_LINKS[0][1])
    cols = [(f"{VETH[0]}, overlap on", VETH[1], True), (f"{VETH[0]}, overlap off", VETH[1], False),
            (f"{VETH_DESIGN[0]}, overlap off", VETH_DESIGN[1], False)]
    rows = [[str(n)] + [pct(efficiency(r, n, lk, overlap=o)) for _, lk, o in cols] for n in WORKERS]
    table("DDP over TCP as measured here: bench_netns's veth bandwidth, and no gain from overlap "
          "on 2 busy cores (calibration below)", ["workers"] + [c[0] for c in cols], rows)

    rf = resnet_workload(FAST_RESNET_SPEEDUP, FAST_MEM_BW, batch=256)
    r32 = resnet_workload(FAST_RESNET_SPEEDUP, FAST_MEM_BW)
    print(f"\n### ResNet-152, workers {FAST_RESNET_SPEEDUP:.0f}x our VM "
          f"({rf.worker.flops / 1e12:.0f} TFLOP/s)")
    links_table(f"DDP, batch 32 per worker ({1e3 * step_time(r32, 1, ALL_LINKS[0][1]):.1f} ms "
                "per step)", r32)
    links_table(f"DDP, batch 256 per worker ({1e3 * step_time(rf, 1, ALL_LINKS[0][1]):.1f} ms "
                "per step)", rf)
    stages_table("ZeRO stages, batch 256, 100 Gbit/s", rf, ALL_LINKS[1][1])

    lf = llama_workload(FAST_LLAMA_FLOPS, FAST_MEM_BW)
    print(f"\n### Llama-3.1-8B LoRA: workers like our VM ({step_time(l, 1, ALL_LINKS[0][1]):.0f} s "
          f"per step) and GPU-class workers ({FAST_LLAMA_FLOPS / 1e12:.0f} TFLOP/s, "
          f"{step_time(lf, 1, ALL_LINKS[0][1]):.2f} s per step)")
    vm_cols = [("VM, 25 Gbit/s", l, ALL_LINKS[0][1]), ("VM, 1.3 GB/s", l, VETH_DESIGN[1])]
    gpu_cols = [(f"GPU, {name}", lf, lk) for name, lk in ALL_LINKS]
    for title, kw in [("DDP: adapters all-reduced on the last of 8 micro-steps", {}),
                      ("ZeRO-3 that also shards the frozen bf16 base (as DeepSpeed does; dtrain "
                       "shards only what is trainable)", {"stage": 3, "gather_frozen": True})]:
        rows = [[str(n)] + [pct(efficiency(w, n, lk, **kw)) for _, w, lk in vm_cols + gpu_cols]
                for n in WORKERS]
        table(title, ["workers"] + [c[0] for c in vm_cols + gpu_cols], rows)

    print("\n### Sensitivity")
    sensitivity(r, rf)

    print("\n### Data loading and checkpoints\n")
    img_bytes = 3 * 32 * 32 + 4  # uint8 HWC + int32 label (dataset shard format)
    for label, w in [("our VM", r), (f"{FAST_RESNET_SPEEDUP:.0f}x workers, batch 256", rf)]:
        rate = w.samples / step_time(w, 1, ALL_LINKS[0][1])
        print(f"- ResNet-152 on {label}: {rate:,.0f} images/s per worker = "
              f"{rate * img_bytes / 1e6:.1f} MB/s of shard reads; 256 workers read "
              f"{256 * rate * img_bytes / 1e9:.2f} GB/s from shared storage.")
    ck = 4 * r.params * 2  # parameters + SGD momentum
    print(f"- ResNet-152 checkpoint: {ck / 1e6:.0f} MB (parameters + momentum) at "
          f"{DISK_WRITE_BW / 1e9:.1f} GB/s = {ck / DISK_WRITE_BW:.2f} s every "
          f"{RESNET_CKPT_EVERY_S // 60} min: {100 * ck / DISK_WRITE_BW / RESNET_CKPT_EVERY_S:.2f}% "
          f"of the time if written synchronously.")
    ck = 4 * l.trainable * 3  # adapters + AdamW moments (the frozen base is not written)
    for label, w in [("our VM", l), ("GPU-class workers", lf)]:
        t = LLAMA_CKPT_EVERY_STEPS * step_time(w, 1, ALL_LINKS[0][1])
        print(f"- Llama-3.1-8B LoRA checkpoint on {label}: {ck / 1e6:.0f} MB (adapters + AdamW "
              f"moments) every {LLAMA_CKPT_EVERY_STEPS} steps ({t:,.0f} s): "
              f"{100 * ck / DISK_WRITE_BW / t:.3f}% of the time.")

    print("\n### Calibration on this VM: 2 ranks")
    calibration()


def calibration():
    """bench_comm's DDP step (2 ranks on the VM) against the model: compute is the measured step
    with overlap off less its wait; the model adds the all-reduce of the alpha-beta formula and
    overlaps it with backward as if communication took no cycles from compute."""
    d, b = 1024, 64
    groups = [Group(f"fc{i}", 2 * d * d, 4 * d * d, 4 * (d * d + d), 4 * (d * d + d)) for i in range(6)]
    groups.append(Group("fc6", 2 * d * 10, 4 * d * 10, 4 * (d * 10 + 10), 4 * (d * 10 + 10)))
    grad = sum(g.grad_bytes for g in groups)
    opt = 12 * grad / 4 / (27 * GB)  # plain SGD: read p, g, write p; one thread's bandwidth
    rows = []
    for name, m in BENCH_DDP.items():
        step_off, wait_off, comm_off = (x / 1e3 for x in m["off"])
        step_on, wait_on, comm_on = (x / 1e3 for x in m["on"])
        compute = step_off - wait_off - opt
        wk = Worker(sum(g.fwd_flops + g.bwd_flops for g in groups) * b / compute, VM_MEM_BW)
        link = (m["bw"], m["alpha"])
        kw = dict(opt_s=opt, bucket=4 * MiB)
        comm = sum(t_allreduce(x, 2, *link) for x, _ in buckets(groups, 4 * MiB, lambda g: g.grad_bytes))
        t_off = micro_step_time(groups, b, wk, 2, link, overlap=False, **kw)
        t_on = micro_step_time(groups, b, wk, 2, link, overlap=True, **kw)
        rows.append([name, f"{1e3 * comm:.1f} / {1e3 * comm_off:.1f}",
                     f"{1e3 * t_off:.1f} / {1e3 * step_off:.1f}",
                     f"{1e3 * t_on:.1f} / {1e3 * step_on:.1f}",
                     f"{1e3 * (t_on - compute - opt):.1f} / {1e3 * wait_on:.1f}",
                     f"{comm_on / comm_off:.1f}x"])
    table(f"bench_comm's DDP step: MLP, {grad / MiB:.1f} MiB of gradients, batch 64 per rank; "
          "model / measured, ms",
          ["path", "all-reduce alone", "step, overlap off", "step, overlap on",
           "wait after backward, overlap on", "all-reduce slowed by overlap"], rows)


if __name__ == "__main__":
    main()
