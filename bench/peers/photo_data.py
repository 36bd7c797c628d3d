"""bench/peers/ray_resnet.py --photos: the photo workload of `make evaluate EVAL_IMAGE=224` in
PyTorch terms (examples/resnet152-imagenet.yaml as scripts/evaluate.py runs it).

  data    an ImageFolder (DIR/<class>/<file>: bench/gen_photos.py's JPEGs) read with
          torchvision.datasets.ImageFolder (Pillow decode of the whole JPEG), transformed as
          dtrain's loader does with data.augment: RandomResizedCrop(224, scale (0.08, 1), ratio
          (3/4, 4/3)), RandomHorizontalFlip, ToTensor, Normalize with ImageNet's mean/std (the
          yaml sets no data.mean/std; dtrain's default for encoded images) -> f32 [B, 3, 224, 224].
          Decoding runs in a DataLoader worker process (num_workers 1), as dtrain decodes in one
          prefetch thread per worker.
  slice   slice s is positions [s*N, (s+1)*N) (mod the folder's size) of one fixed permutation
          of the folder (numpy default_rng(0)), so a slice mixes the classes as dtrain's shuffled
          loader does; the DistributedSampler then splits it over the workers.
  model   torchvision resnet{depth} as it comes: 7x7 stride-2 conv1 + max-pool, 3 input
          channels, num_classes = the folder's class count (dtrain: small_stem false).
  optim   SGD lr 0.1 momentum 0.9 (no Nesterov), weight decay 1e-4 on conv and fc weights only
          (dtrain's DT_PARAM_NO_DECAY on batchnorm and biases); cross-entropy with label
          smoothing 0.1.

Differences from dtrain, named: dtrain decodes JPEGs with DCT scaling (1/2 .. 1/8 where the
crop allows) and the peer decodes at full size; dtrain's runs use the yaml's cosine schedule
(1 warm-up step, as scripts/evaluate.py sets it) and the peer a constant lr 0.1, which changes
no step's cost; the augmentation's random draws differ (different generators)."""
import numpy as np

MEAN = (0.485, 0.456, 0.406)  # ImageNet's, torchvision's and dtrain's default for photos
STD = (0.229, 0.224, 0.225)
LABEL_SMOOTHING = 0.1
LOADER_WORKERS = 1
# ray_resnet.make_optimizer's arguments (lr 0.1, momentum 0.9 in both modes)
OPTIM = {"weight_decay": 1e-4, "nesterov": False}


def open_photos(root, size=224):
    """(ImageFolder with the training transform, one-line description)."""
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder
    tf = T.Compose([T.RandomResizedCrop(size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)),
                    T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    ds = ImageFolder(root, transform=tf)
    return ds, f"ImageFolder {root}: {len(ds)} images, {len(ds.classes)} classes"


def slice_dataset(ds, s, n):
    """Slice s of n images: a Subset of ds, positions [s*n, (s+1)*n) of the fixed permutation."""
    import torch
    order = np.random.default_rng(0).permutation(len(ds))
    idx = order[(np.arange(n, dtype=np.int64) + s * n) % len(ds)]
    return torch.utils.data.Subset(ds, idx.tolist())
