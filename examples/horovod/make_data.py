#!/usr/bin/env python3
"""Small data sets in the formats Horovod's PyTorch examples read, made here (no download).

    make_data.py mnist DIR [--train N] [--test N]
        DIR/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte (and the .gz of each, as
        torchvision's download leaves them): MNIST's IDX format, 28x28 grey digits 0-9 drawn
        from a 5x7 glyph per digit, scaled, shifted, slanted and noised per image.
        torchvision.datasets.MNIST(DIR) finds them and skips its download, so
        `pytorch_mnist.py --data-dir DIR` trains on them.
    make_data.py imagenet DIR [--classes N] [--train N] [--val N] [--size PX]
        DIR/train/<class>/*.JPEG and DIR/val/<class>/*.JPEG (ImageFolder's layout, as
        pytorch_imagenet_resnet50.py reads with --train-dir/--val-dir): small RGB JPEGs, each
        class its own colour and stripe pattern.

The same seed gives the same bytes. IDX (http://yann.lecun.com/exdb/mnist/): a big-endian
magic 0x00000803 (unsigned bytes, 3 dimensions) for images, 0x00000801 for labels, then each
dimension as a big-endian uint32, then the data row-major.
"""

import argparse
import gzip
import os
import struct

import numpy as np

# 5 columns x 7 rows per digit, '#' = ink.
_GLYPHS = {
    0: [" ### ", "#   #", "#  ##", "# # #", "##  #", "#   #", " ### "],
    1: ["  #  ", " ##  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "],
    2: [" ### ", "#   #", "    #", "   # ", "  #  ", " #   ", "#####"],
    3: ["#####", "   # ", "  #  ", "   # ", "    #", "#   #", " ### "],
    4: ["   # ", "  ## ", " # # ", "#  # ", "#####", "   # ", "   # "],
    5: ["#####", "#    ", "#### ", "    #", "    #", "#   #", " ### "],
    6: ["  ## ", " #   ", "#    ", "#### ", "#   #", "#   #", " ### "],
    7: ["#####", "    #", "   # ", "  #  ", " #   ", " #   ", " #   "],
    8: [" ### ", "#   #", "#   #", " ### ", "#   #", "#   #", " ### "],
    9: [" ### ", "#   #", "#   #", " ####", "    #", "   # ", " ##  "],
}


def digit_image(label, rng):
    """One 28x28 uint8 image of `label`: the glyph scaled to about 3 px per cell, placed at a
    random offset, slanted, blurred a little and noised."""
    glyph = np.array([[c == "#" for c in row] for row in _GLYPHS[label]], dtype=np.float32)
    sy, sx = rng.uniform(2.4, 3.0), rng.uniform(2.4, 3.2)
    slant = rng.uniform(-0.25, 0.25)
    h, w = int(7 * sy), int(5 * sx)
    oy, ox = rng.integers(2, 28 - h - 1), rng.integers(4, 28 - w - 3)
    img = np.zeros((28, 28), dtype=np.float32)
    for y in range(h):
        shift = int(round(slant * (h / 2 - y)))
        for x in range(w):
            if glyph[min(6, int(y / sy)), min(4, int(x / sx))]:
                xx = ox + x + shift
                if 0 <= xx < 28:
                    img[oy + y, xx] = 1.0
    blurred = img.copy()
    blurred[1:, :] += 0.3 * img[:-1, :]
    blurred[:, 1:] += 0.3 * img[:, :-1]
    blurred += rng.normal(0, 0.08, size=img.shape)
    return (np.clip(blurred, 0, 1) * 255).astype(np.uint8)


def write_idx(path, array):
    """`array` (uint8) in IDX format at `path`, and gzipped at `path`.gz."""
    header = struct.pack(">I", 0x0800 | array.ndim) + b"".join(
        struct.pack(">I", d) for d in array.shape)
    data = header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()
    with open(path, "wb") as f:
        f.write(data)
    with gzip.GzipFile(path + ".gz", "wb", mtime=0) as f:
        f.write(data)


def make_mnist(root, n_train, n_test, seed):
    raw = os.path.join(root, "MNIST", "raw")
    os.makedirs(raw, exist_ok=True)
    rng = np.random.default_rng(seed)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = np.arange(n, dtype=np.uint8) % 10
        rng.shuffle(labels)
        images = np.stack([digit_image(int(l), rng) for l in labels])
        write_idx(os.path.join(raw, prefix + "-images-idx3-ubyte"), images)
        write_idx(os.path.join(raw, prefix + "-labels-idx1-ubyte"), labels)
    return raw


def make_imagenet(root, classes, n_train, n_val, size, seed):
    from PIL import Image
    rng = np.random.default_rng(seed)
    for split, n in (("train", n_train), ("val", n_val)):
        for c in range(classes):
            d = os.path.join(root, split, "n%08d" % c)  # ImageNet's synset-like names
            os.makedirs(d, exist_ok=True)
            colour = np.array([(c * 97) % 256, (c * 57 + 80) % 256, (c * 31 + 160) % 256])
            for i in range(n):
                yy, xx = np.mgrid[0:size, 0:size]
                stripes = ((xx * (c + 1) + yy) // max(2, size // 8)) % 2
                img = colour[None, None, :] * (0.6 + 0.4 * stripes[..., None])
                img = img + rng.normal(0, 12, size=img.shape)
                Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB").save(
                    os.path.join(d, "%s_%d.JPEG" % (split, i)), format="JPEG", quality=90)
    return root


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    m = sub.add_parser("mnist")
    m.add_argument("dir")
    m.add_argument("--train", type=int, default=600)
    m.add_argument("--test", type=int, default=200)
    i = sub.add_parser("imagenet")
    i.add_argument("dir")
    i.add_argument("--classes", type=int, default=2)
    i.add_argument("--train", type=int, default=2, help="images per class")
    i.add_argument("--val", type=int, default=2, help="images per class")
    i.add_argument("--size", type=int, default=32, help="pixels per side")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.what == "mnist":
        print(make_mnist(a.dir, a.train, a.test, a.seed))
    else:
        print(make_imagenet(a.dir, a.classes, a.train, a.val, a.size, a.seed))


if __name__ == "__main__":
    main()
