"""The seed's own stack beside dtrain (make evaluate, issue 11): the ResNet epoch-slice workload
of dtrain run with Ray Train (TorchTrainer, DDP over gloo on CPU workers), or with plain PyTorch
DDP (torch.multiprocessing + gloo, --no-ray) so Ray's own overhead shows. Two workloads: the
Fashion-MNIST one of `make evaluate` (--data, below) and the 224x224 photo one of `make evaluate
EVAL_IMAGE=224` (--photos DIR: data, slices, model and optimizer in bench/peers/photo_data.py).

Workload with --data, the same as dtrain's:
  model   torchvision resnet{18,152} with dtrain's small-image stem (src/nn/resnet.c): conv1 3x3
          stride 1 padding 1, no bias, 1 input channel; no max-pool; 10 classes. The new conv1 is
          initialised as torchvision (and dt_resnet_init) initialise every conv: kaiming_normal_
          fan_out / relu.
  optim   SGD lr 0.1 momentum 0.9 nesterov, weight decay 5e-4 on conv and fc weights only
          (batchnorm weights/biases and fc.bias are DT_PARAM_NO_DECAY in dtrain); constant lr.
  data    Fashion-MNIST train split read from dtrain's own import (`dtrain data import
          fashion-mnist /usr/share/datasets/fashion-mnist -o DIR`: DIR/train/manifest.json +
          shard-*.dts, read here with numpy, checksums not verified), or from Debian's raw IDX
          files when DIR holds them; the same 60000 images in the same order either way. uint8 ->
          f32 x / 255 (dtrain's loader default: mean 0, std 1), NCHW [B, 1, 28, 28], fp32, no
          augmentation.
  slice   An epoch-slice is N images: slice s is train images [s*N, (s+1)*N) (mod 60000), split
          over the workers by DistributedSampler (shuffle, seed 0, set_epoch(s)): each worker runs
          N / workers images in per-worker batches of B.

Measured (time.perf_counter within a process, time.time across processes; all on one host):
  epoch_slice_s   wall time of one slice's training steps on rank 0, between a barrier before the
                  first step and one after the last (data loading included, checkpoint excluded);
                  img_per_s = N / epoch_slice_s. Per slice in `slices`; `epoch_slice_s` is slice 0.
  steady          steady_img_per_s = workers x B / the median step after each slice's first;
                  a step is forward + backward + update (--data: the batch is in memory), and
                  with --photos also the wait for the batch from the DataLoader worker
                  (data_wait_pct: that wait's share), as dtrain's throughput includes its
                  loader's.
  startup_s       from before ray.init (or mp.spawn) to the start of slice 0 on rank 0: Ray
                  startup, worker group, process group, model build, data read.
  checkpoint      rank 0: torch.save({model, optimizer, slice}) into a fresh temporary directory,
                  then ray.train.report(metrics, checkpoint=Checkpoint.from_directory(tmp)) (which
                  persists it under RunConfig(storage_path)); save_s = start of torch.save until
                  report returns. --no-ray: torch.save into STORAGE/NAME/checkpoint_NNNNNN (written
                  as .tmp, renamed), then a barrier. bytes = size of the saved state file.
  recovery        --kill-after-slice: after slice 0's checkpoint, worker --kill-rank (default 1)
                  runs os.kill(os.getpid(), SIGKILL) on itself. Ray: FailureConfig(max_failures=1)
                  restarts the worker group, which resumes from ray.train.get_checkpoint();
                  --no-ray: mp.spawn's join sees the death, terminates the others, and the driver
                  spawns a new group that resumes from the newest checkpoint on storage.
                  recover_s = from the kill until the first training step after the restart has
                  completed on rank 0. Then the second slice is finished.
                  When: --kill-at step (default) kills during slice 1, once the worker's first
                  step of it is done and at least --kill-min-gap s (3) after slice 0's report
                  returned. Why the gap: Ray Train (v2) collects ray.train.report() results by
                  polling the workers every RAY_TRAIN_HEALTH_CHECK_INTERVAL_S (2 s); a worker killed
                  before that poll takes its report with it, the round is never completed and the
                  checkpoint that rank 0 already wrote to storage is not registered, so the
                  restarted group starts from scratch. --kill-at report kills right after
                  report() returns, which shows exactly that (checkpoint_lost in the result).

Usage:
  python bench/peers/ray_resnet.py --data DIR --images N --batch B --workers 2 --threads 1 \
      --storage PATH --out result.json [--kill-after-slice] [--depth 152] [--no-ray]
  python bench/peers/ray_resnet.py --photos DIR ...   (DIR/<class>/<file>, bench/gen_photos.py)
"""
import argparse
import gzip
import json
import os
import signal
import statistics
import struct
import sys
import tempfile
import time

import numpy as np


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", help="dtrain import dir (DIR/train/manifest.json) or a split "
                     "dir, or raw IDX dir")
    src.add_argument("--photos", help="an ImageFolder of photos (DIR/<class>/<file>): the 224x224 "
                     "workload of bench/peers/photo_data.py")
    p.add_argument("--images", type=int, required=True, help="N, images per epoch-slice (all workers)")
    p.add_argument("--batch", type=int, required=True, help="per-worker batch B")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads in each worker")
    p.add_argument("--depth", type=int, default=152, choices=[18, 34, 50, 101, 152])
    p.add_argument("--slices", type=int, default=2, help="epoch-slices to run (default 2)")
    p.add_argument("--storage", required=True, help="RunConfig(storage_path=...): checkpoints go here")
    p.add_argument("--out", required=True, help="result JSON")
    p.add_argument("--kill-after-slice", action="store_true",
                   help="kill one worker (SIGKILL) after slice 0's checkpoint and recover")
    p.add_argument("--kill-rank", type=int, default=1)
    p.add_argument("--kill-at", choices=["step", "report"], default="step",
                   help="step: after the first step of slice 1 (default); report: right after "
                   "slice 0's report/save returns")
    p.add_argument("--kill-min-gap", type=float, default=3.0,
                   help="--kill-at step: at least this many seconds between slice 0's report "
                   "returning and the kill (the victim sleeps the rest; not counted in recover_s)")
    p.add_argument("--max-failures", type=int, default=None,
                   help="FailureConfig(max_failures); default 1 with --kill-after-slice, else 0")
    p.add_argument("--no-ray", action="store_true", help="plain PyTorch DDP (mp.spawn + gloo)")
    p.add_argument("--port", type=int, default=29611, help="--no-ray: first rendezvous port")
    p.add_argument("--seed", type=int, default=1234)
    a = p.parse_args(argv)
    if a.max_failures is None:
        a.max_failures = 1 if a.kill_after_slice else 0
    if a.images <= 0 or a.batch <= 0 or a.workers <= 0 or a.threads <= 0 or a.slices <= 0:
        p.error("--images, --batch, --workers, --threads and --slices must be > 0")
    if a.images % a.workers:
        p.error(f"--images {a.images} is not a multiple of --workers {a.workers}")
    if a.kill_after_slice and (a.slices < 2 or not 0 <= a.kill_rank < a.workers or a.workers < 2):
        p.error("--kill-after-slice needs --slices >= 2, --workers >= 2 and 0 <= --kill-rank < workers")
    a.data = os.path.abspath(a.data) if a.data else None
    a.photos = os.path.abspath(a.photos) if a.photos else None
    a.storage = os.path.abspath(a.storage)
    return a


# ---- data -------------------------------------------------------------------------------------

SHARD_MAGIC = b"DTSHARD\x1a"
SEC_PIXELS, SEC_LABELS = 1, 2


def read_dtrain_shard(path):
    """One dtrain image shard (src/data/shard.h): 256-byte header, section table at byte 64 of
    4 x (u32 id, u32 dtype, u64 offset, u64 bytes, u64 count); pixels u8 [N, H, W, C], labels
    i32 [N]. Returns (pixels [N, C, H, W] uint8, labels [N] int64)."""
    raw = np.fromfile(path, dtype=np.uint8)
    hdr = raw[:256].tobytes()
    if hdr[:8] != SHARD_MAGIC:
        raise ValueError(f"{path}: not a dtrain shard (magic {hdr[:8]!r})")
    kind, = struct.unpack_from("<I", hdr, 16)
    records, = struct.unpack_from("<Q", hdr, 24)
    h, w, c, _ = struct.unpack_from("<4I", hdr, 32)
    nsec, = struct.unpack_from("<I", hdr, 56)
    if kind != 1:
        raise ValueError(f"{path}: shard kind {kind}, expected 1 (image)")
    sec = {}
    for i in range(nsec):
        sid, _dt, off, nbytes, _cnt = struct.unpack_from("<IIQQQ", hdr, 64 + 32 * i)
        sec[sid] = (off, nbytes)
    po, pn = sec[SEC_PIXELS]
    lo, ln = sec[SEC_LABELS]
    if pn != records * h * w * c or ln != records * 4:
        raise ValueError(f"{path}: section sizes {pn}, {ln} do not match {records} x {h}x{w}x{c}")
    px = raw[po:po + pn].reshape(records, h, w, c).transpose(0, 3, 1, 2)
    lab = raw[lo:lo + ln].view("<i4").astype(np.int64)
    return np.ascontiguousarray(px), lab


def read_idx(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        b = f.read()
    magic, = struct.unpack_from(">I", b, 0)
    nd = magic & 0xFF
    dims = struct.unpack_from(">" + "I" * nd, b, 4)
    return np.frombuffer(b, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)


def load_train(data):
    """(pixels [60000, 1, 28, 28] uint8, labels [60000] int64, source description)."""
    for d in (os.path.join(data, "train"), data):
        man = os.path.join(d, "manifest.json")
        if os.path.isfile(man):
            with open(man) as f:
                m = json.load(f)
            parts = [read_dtrain_shard(os.path.join(d, s["file"])) for s in m["shards"]]
            px = np.concatenate([p for p, _ in parts])
            lab = np.concatenate([l for _, l in parts])
            if len(px) != m["records"]:
                raise ValueError(f"{man}: {len(px)} images in shards, manifest says {m['records']}")
            return px, lab, f"dtrain shards {d} (fingerprint {m.get('fingerprint')})"
    for suf in ("", ".gz"):
        ip = os.path.join(data, "train-images-idx3-ubyte" + suf)
        lp = os.path.join(data, "train-labels-idx1-ubyte" + suf)
        if os.path.isfile(ip) and os.path.isfile(lp):
            px = read_idx(ip)
            return px[:, None, :, :].copy(), read_idx(lp).astype(np.int64), f"IDX {ip}"
    raise FileNotFoundError(f"{data}: neither a dtrain dataset (train/manifest.json) nor IDX files")


def slice_dataset(px, lab, s, n):
    """Slice s: images [s*n, (s+1)*n) modulo the split, as f32 x / 255 [n, 1, 28, 28]."""
    import torch
    idx = (np.arange(n, dtype=np.int64) + s * n) % len(px)
    x = torch.from_numpy(px[idx].astype(np.float32) * np.float32(1.0 / 255.0))
    y = torch.from_numpy(lab[idx])
    return torch.utils.data.TensorDataset(x, y)


# ---- model ------------------------------------------------------------------------------------

def build_model(depth, in_ch=1, classes=10):
    import torch.nn as nn
    import torchvision
    m = getattr(torchvision.models, f"resnet{depth}")(num_classes=classes)
    m.conv1 = nn.Conv2d(in_ch, 64, 3, 1, 1, bias=False)
    nn.init.kaiming_normal_(m.conv1.weight, mode="fan_out", nonlinearity="relu")
    m.maxpool = nn.Identity()
    return m


def make_optimizer(model, weight_decay=5e-4, nesterov=True):
    """Decay only conv and fc weights (4-d and 2-d tensors), as dtrain's DT_PARAM_NO_DECAY."""
    import torch
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    return torch.optim.SGD([{"params": decay, "weight_decay": weight_decay},
                            {"params": no_decay, "weight_decay": 0.0}],
                           lr=0.1, momentum=0.9, nesterov=nesterov)


# ---- the training function (both modes) -------------------------------------------------------

class Events:
    """Appends one JSON line per event; each write is a single O_APPEND write, so lines from
    several processes do not interleave and survive the writer's SIGKILL."""

    def __init__(self, path, rank):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.rank = rank

    def __call__(self, ev, **kw):
        kw.update(ev=ev, rank=self.rank, pid=os.getpid(), t=time.time())
        os.write(self.fd, (json.dumps(kw) + "\n").encode())


def train_loop(cfg, backend=None):
    """Runs in every worker. backend: None under Ray (ray.train API), else the --no-ray backend
    object with rank, world, get_checkpoint_dir() and save(state_path, metrics)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    t_entry = time.time()
    torch.set_num_threads(cfg["threads"])
    if backend is None:
        import ray.train
        import ray.train.torch as rtt
        ctx = ray.train.get_context()
        rank, world = ctx.get_world_rank(), ctx.get_world_size()
        ckpt = ray.train.get_checkpoint()
    else:
        rank, world = backend.rank, backend.world
        ckpt = backend.get_checkpoint_dir()
    ev = Events(cfg["events"], rank)
    restored = ckpt is not None
    # A restarted group (after the injected kill) whether or not it found a checkpoint.
    restarted = os.path.exists(cfg["events"] + ".killed")
    ev("fn_start", t_entry=t_entry, restored=restored, restarted=restarted,
       threads=torch.get_num_threads())

    torch.manual_seed(cfg["seed"])  # same initial weights everywhere (DDP broadcasts rank 0's anyway)
    t0 = time.perf_counter()
    photos = cfg["photos"] is not None
    if photos:  # the 224x224 workload: stock torchvision model, the photo folder's classes
        sys.path.insert(0, cfg["here"])  # under Ray this runs in a worker actor
        import photo_data as ph
        import torchvision
        ds_all, source = ph.open_photos(cfg["photos"])
        model = getattr(torchvision.models, f"resnet{cfg['depth']}")(
            num_classes=len(ds_all.classes))
        opt = make_optimizer(model, **ph.OPTIM)
        # fork: a Ray worker's default (prepare_data_loader drops the argument); mp.spawn's
        # children would spawn instead, re-importing this script for every slice's loader.
        smoothing = ph.LABEL_SMOOTHING
        loader_kw = {"num_workers": ph.LOADER_WORKERS, "multiprocessing_context": "fork"}
    else:
        model = build_model(cfg["depth"])
        opt = make_optimizer(model)
        smoothing, loader_kw = 0.0, {}
    start = 0
    load_s = None
    if restored:
        tl = time.perf_counter()
        if backend is None:
            with ckpt.as_directory() as d:
                st = torch.load(os.path.join(d, "state.pt"), weights_only=True)
        else:
            st = torch.load(os.path.join(ckpt, "state.pt"), weights_only=True)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["optimizer"])
        start = st["slice"] + 1
        load_s = time.perf_counter() - tl
    if backend is None:
        dmodel = rtt.prepare_model(model)  # DistributedDataParallel over the gloo group on CPU
    else:
        dmodel = torch.nn.parallel.DistributedDataParallel(model)
    if not photos:
        px, lab, source = load_train(cfg["data"])
    setup_s = time.perf_counter() - t0
    ev("setup", setup_s=setup_s, load_s=load_s, start_slice=start, source=source,
       params=sum(p.numel() for p in model.parameters()),
       classes=len(ds_all.classes) if photos else 10)

    per_worker = cfg["images"] // world
    first_after_restart = restarted
    t_report0 = None

    def kill_self(where):
        ev("kill", where=where)
        with open(cfg["events"] + ".killed", "w") as f:
            f.write(str(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)

    victim = cfg["kill"] and not restarted and rank == cfg["kill_rank"]
    for s in range(start, cfg["slices"]):
        ds = ph.slice_dataset(ds_all, s, cfg["images"]) if photos else \
            slice_dataset(px, lab, s, cfg["images"])
        if backend is None:
            loader = torch.utils.data.DataLoader(ds, batch_size=cfg["batch"], shuffle=True,
                                                 **loader_kw)
            loader = rtt.prepare_data_loader(loader)  # adds DistributedSampler(shuffle=True)
            sampler = loader.sampler
        else:
            sampler = torch.utils.data.distributed.DistributedSampler(ds, world, rank, shuffle=True,
                                                                      seed=0)
            loader = torch.utils.data.DataLoader(ds, batch_size=cfg["batch"], sampler=sampler,
                                                 **loader_kw)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(s)
        dmodel.train()
        dist.barrier()
        t_slice = time.perf_counter()
        steps, waits, seen, loss_sum, shape = [], [], 0, 0.0, None
        t_prev = t_slice
        for x, y in loader:
            ts = time.perf_counter()
            waits.append(ts - t_prev)  # waiting for this batch (the loader's decode, if behind)
            shape = shape or list(x.shape)
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(dmodel(x), y, label_smoothing=smoothing)
            loss.backward()
            opt.step()
            t_prev = time.perf_counter()
            steps.append(t_prev - ts)
            seen += len(y)
            loss_sum += loss.item() * len(y)
            if first_after_restart:
                ev("first_step_after_restart", slice=s, step_s=steps[-1], restored=restored)
                first_after_restart = False
            if victim and cfg["kill_at"] == "step" and s == 1 and len(steps) == 1:
                gap = time.perf_counter() - t_report0
                if gap < cfg["kill_min_gap"]:
                    time.sleep(cfg["kill_min_gap"] - gap)
                kill_self(f"slice 1 after step 1, {max(gap, cfg['kill_min_gap']):.2f} s after "
                          "slice 0's report returned")
        dist.barrier()
        slice_s = time.perf_counter() - t_slice
        if seen != per_worker:
            raise RuntimeError(f"rank {rank}: slice {s} ran {seen} images, expected {per_worker}")

        metrics = {"slice": s, "loss": loss_sum / seen, "slice_s": slice_s}
        t_save = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="ray_resnet_ckpt_") as tmp:
            nbytes = None
            if rank == 0:
                state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "slice": s}
                sp = os.path.join(tmp, "state.pt")
                torch.save(state, sp)
                nbytes = os.path.getsize(sp)
            if backend is None:
                from ray.train import Checkpoint
                ray.train.report(metrics,
                                 checkpoint=Checkpoint.from_directory(tmp) if rank == 0 else None)
            else:
                backend.save(os.path.join(tmp, "state.pt") if rank == 0 else None, s)
        t_report0 = time.perf_counter()
        save_s = t_report0 - t_save
        ev("slice", slice=s, slice_s=slice_s, step_s=steps, wait_s=waits, input_shape=shape,
           images=seen, loss=metrics["loss"],
           save_s=save_s, ckpt_bytes=nbytes, restored=restored, restarted=restarted)
        if victim and cfg["kill_at"] == "report" and s == 0:
            kill_self("right after slice 0's report returned")
    ev("fn_end")


# ---- --no-ray backend -------------------------------------------------------------------------

class PlainBackend:
    """Checkpoints as STORAGE/NAME/checkpoint_NNNNNN/state.pt, the newest two kept."""

    def __init__(self, rank, world, run_dir):
        self.rank, self.world, self.run_dir = rank, world, run_dir

    def _ckpts(self):
        if not os.path.isdir(self.run_dir):
            return []
        return sorted(d for d in os.listdir(self.run_dir)
                      if d.startswith("checkpoint_") and not d.endswith(".tmp"))

    def get_checkpoint_dir(self):
        c = self._ckpts()
        return os.path.join(self.run_dir, c[-1]) if c else None

    def save(self, state_path, s):
        import shutil
        import torch.distributed as dist
        if self.rank == 0:
            d = os.path.join(self.run_dir, f"checkpoint_{s:06d}")
            os.makedirs(d + ".tmp", exist_ok=True)
            shutil.move(state_path, os.path.join(d + ".tmp", "state.pt"))
            os.rename(d + ".tmp", d)
            for old in self._ckpts()[:-2]:
                shutil.rmtree(os.path.join(self.run_dir, old), ignore_errors=True)
        dist.barrier()


def plain_worker(rank, cfg, port):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=cfg["workers"])
    train_loop(cfg, PlainBackend(rank, cfg["workers"], cfg["run_dir"]))
    dist.destroy_process_group()


def run_plain(cfg, a, info):
    import torch.multiprocessing as mp
    os.makedirs(cfg["run_dir"], exist_ok=True)
    # As Ray sets it for a worker of {"CPU": 1}; the children inherit it before importing torch.
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    failures = 0
    while True:
        try:
            mp.spawn(plain_worker, args=(cfg, a.port + failures), nprocs=a.workers, join=True)
            return None
        except (mp.ProcessExitedException, mp.ProcessRaisedException) as e:
            failures += 1
            info.setdefault("failures", []).append({"t": time.time(), "error": str(e)[:300]})
            if failures > a.max_failures:
                return f"worker group failed {failures} times: {str(e)[:300]}"


# ---- Ray driver -------------------------------------------------------------------------------

def run_ray(cfg, a, info):
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer
    t = time.time()
    ray.init(num_cpus=max(a.workers, os.cpu_count() or 1), log_to_driver=True)
    info["ray_init_s"] = time.time() - t
    res = ray.cluster_resources()
    info["ray"] = {"version": ray.__version__,
                   "object_store_memory_bytes": int(res.get("object_store_memory", 0)),
                   "cluster_cpus": res.get("CPU"),
                   "train_v2": os.environ.get("RAY_TRAIN_V2_ENABLED", "1 (default)"),
                   "health_check_interval_s": float(os.environ.get(
                       "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "2.0"))}
    trainer = TorchTrainer(
        train_loop,
        train_loop_config=cfg,
        torch_config=TorchConfig(backend="gloo"),
        scaling_config=ScalingConfig(num_workers=a.workers, use_gpu=False,
                                     resources_per_worker={"CPU": 1}),
        run_config=RunConfig(name=cfg["name"], storage_path=a.storage,
                             checkpoint_config=CheckpointConfig(num_to_keep=2),
                             failure_config=FailureConfig(max_failures=a.max_failures)))
    err = None
    try:
        result = trainer.fit()
        info["ray_checkpoint"] = result.checkpoint.path if result.checkpoint else None
        info["ray_metrics"] = result.metrics
        if result.error:
            err = f"{type(result.error).__name__}: {str(result.error)[:300]}"
    except Exception as e:  # TrainingFailedError once max_failures is exceeded
        err = f"{type(e).__name__}: {str(e)[:300]}"
    finally:
        ray.shutdown()
    return err


# ---- summary ----------------------------------------------------------------------------------

def summarise(a, cfg, info, events, t_start, t_end, err):
    import torch
    import torchvision
    # Rank 0's slices in the order they ran; a slice re-run after the restart is listed again.
    runs = [e for e in events if e["ev"] == "slice" and e["rank"] == 0]
    fn0 = sorted((e for e in events if e["ev"] == "fn_start"), key=lambda e: e["t"])
    setup0 = next((e for e in events if e["ev"] == "setup" and e["rank"] == 0), {})
    sl = []
    for e in runs:
        st = e["step_s"]
        sl.append({"slice": e["slice"], "seconds": round(e["slice_s"], 4),
                   "img_per_s": round(a.images / e["slice_s"], 3), "steps": len(st),
                   "first_step_s": round(st[0], 4),
                   "median_step_s": round(statistics.median(st), 4),
                   "loss": round(e["loss"], 5), "after_restart": e["restarted"],
                   "checkpoint_save_s": round(e["save_s"], 4), "checkpoint_bytes": e["ckpt_bytes"]})
    # Start of the first slice on rank 0 = its "slice" event time less the slice and save times.
    s0 = runs[0] if runs else None
    startup_s = (s0["t"] - s0["save_s"] - s0["slice_s"] - t_start) if s0 else None
    # Steady state: every step but the first of each slice run (warm-up, DDP bucket rebuild,
    # the DataLoader worker's start); with --photos a step includes the wait for its batch.
    photos = a.photos is not None
    if photos:
        later_steps = [x + w for e in runs for x, w in zip(e["step_s"][1:], e["wait_s"][1:])]
        later_waits = [w for e in runs for w in e["wait_s"][1:]]
    else:
        later_steps = [x for e in runs for x in e["step_s"][1:]]
    rec = None
    if a.kill_after_slice:
        kill = next((e for e in events if e["ev"] == "kill"), None)
        first = next((e for e in events
                      if e["ev"] == "first_step_after_restart" and e["rank"] == 0), None)
        restart = [e for e in fn0 if e.get("restarted")]
        rsetup = [e for e in events if e["ev"] == "setup" and e["t"] > (kill or {"t": 1e18})["t"]]
        resumed = rsetup[0]["start_slice"] if rsetup else None
        rec = {"killed_rank": a.kill_rank,
               "how": "os.kill(os.getpid(), SIGKILL) in the worker process itself, "
               + (kill["where"] if kill else "(no kill happened)"),
               "recover_s": round(first["t"] - kill["t"], 3) if kill and first else None,
               "kill_to_restarted_fn_s": round(min(e["t_entry"] for e in restart) - kill["t"], 3)
               if kill and restart else None,
               "restarted_setup_s": round(max(e["setup_s"] for e in rsetup), 3) if rsetup else None,
               "checkpoint_load_s": max((round(e["load_s"], 4) for e in rsetup
                                         if e["load_s"] is not None), default=None),
               "first_step_after_restart_s": round(first["step_s"], 4) if first else None,
               "resumed_at_slice": resumed,
               # The kill came after slice 0's checkpoint: resuming at 0 means it was not used.
               "checkpoint_lost": resumed == 0 if resumed is not None else None}
    saves = [x["checkpoint_save_s"] for x in sl]
    out = {
        "tool": "torch-ddp" if a.no_ray else "ray-train",
        "torch": torch.__version__, "torchvision": torchvision.__version__,
        "model": f"resnet{a.depth} stock stem (7x7 s2 conv1 + maxpool) 3x224x224 "
        f"{setup0.get('classes')} classes" if photos else
        f"resnet{a.depth} small-stem (3x3 s1 conv1, no maxpool) 1x28x28 10 classes",
        "params": setup0.get("params"),
        "optimizer": "SGD lr 0.1 momentum 0.9 wd 1e-4 (weights only), label smoothing 0.1, fp32"
        if photos else "SGD lr 0.1 momentum 0.9 nesterov wd 5e-4 (weights only), fp32",
        "input_shape": runs[0].get("input_shape") if runs else None,
        "data": setup0.get("source"),
        "images_per_slice": a.images, "batch_per_worker": a.batch, "workers": a.workers,
        "threads_per_worker": a.threads, "slices_run": a.slices,
        "epoch_slice_s": sl[0]["seconds"] if sl else None,
        "img_per_s": sl[0]["img_per_s"] if sl else None,
        "steady_step_s": round(statistics.median(later_steps), 4) if later_steps else None,
        "steady_img_per_s": round(a.workers * a.batch / statistics.median(later_steps), 3)
        if later_steps else None,
        "data_wait_pct": round(100 * sum(later_waits) / sum(later_steps), 2)
        if photos and later_steps else None,
        "startup_s": round(startup_s, 3) if startup_s is not None else None,
        "startup": {"ray_init_s": round(info["ray_init_s"], 3) if "ray_init_s" in info else None,
                    "to_train_fn_s": round(fn0[0]["t_entry"] - t_start, 3) if fn0 else None,
                    "worker_setup_s": round(setup0["setup_s"], 3) if setup0 else None},
        "checkpoint_save_s": saves[0] if saves else None,
        "checkpoint_save_s_all": saves,
        "checkpoint_bytes": sl[0]["checkpoint_bytes"] if sl else None,
        "recovery": rec,
        "slices": sl,
        "total_s": round(t_end - t_start, 3),
        "completed": err is None and sorted({x["slice"] for x in sl}) == list(range(a.slices)),
        "error": err,
        "storage": os.path.join(a.storage, cfg["name"]),
        "shm_bytes": os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize
        if os.path.isdir("/dev/shm") else None,
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
    }
    for k in ("ray", "failures", "ray_checkpoint"):
        if k in info:
            out[k] = info[k]
    return out


def main(argv=None):
    a = parse_args(argv)
    name = f"{'ddp' if a.no_ray else 'ray'}-resnet{a.depth}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    os.makedirs(a.storage, exist_ok=True)
    ev_path = os.path.abspath(a.out) + ".events.jsonl"
    for f in (ev_path, ev_path + ".killed"):
        if os.path.exists(f):
            os.unlink(f)
    cfg = {"data": a.data, "photos": a.photos, "here": os.path.dirname(os.path.abspath(__file__)),
           "images": a.images, "batch": a.batch, "threads": a.threads,
           "depth": a.depth, "slices": a.slices, "kill": a.kill_after_slice,
           "kill_rank": a.kill_rank, "kill_at": a.kill_at, "kill_min_gap": a.kill_min_gap,
           "seed": a.seed, "events": ev_path, "name": name,
           "workers": a.workers, "run_dir": os.path.join(a.storage, name)}
    info = {}
    t_start = time.time()
    err = run_plain(cfg, a, info) if a.no_ray else run_ray(cfg, a, info)
    t_end = time.time()
    events = []
    if os.path.exists(ev_path):
        with open(ev_path) as f:
            events = [json.loads(l) for l in f if l.strip()]
    out = summarise(a, cfg, info, events, t_start, t_end, err)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    r = out["recovery"] or {}
    print(f"{out['tool']} resnet{a.depth} N={a.images} B={a.batch} workers={a.workers} "
          f"threads={a.threads}: epoch_slice_s={out['epoch_slice_s']} img_per_s={out['img_per_s']} "
          f"steady_img_per_s={out['steady_img_per_s']} startup_s={out['startup_s']} "
          f"checkpoint_save_s={out['checkpoint_save_s']} bytes={out['checkpoint_bytes']} "
          f"recover_s={r.get('recover_s')} completed={out['completed']} -> {a.out}", flush=True)
    return 0 if out["completed"] else 1


if __name__ == "__main__":
    sys.exit(main())
