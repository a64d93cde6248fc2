"""Pathfinder (Linsley et al., 2018; Kim*, Linsley* et al., ICLR 2020) and Path-X as used by Long
Range Arena (Tay et al., 2021): our own contour-integration image generator and a loader of the
release layout.

    python -m data.lra.pathfinder [--lra_dir=DIR] --resolution=32 \\
        --difficulty=curv_contour_length_14 --num=200000 --seed=0 [--workers=N --batch_size=1000]

(``DIR``: the folder train.py's ``--lra_dir`` takes; default ``$LRA_DIR``, else ``data/lra/files``)
writes ``DIR/pathfinder32/<difficulty>/imgs/<batch>/sample_<i>.png`` (8-bit grayscale,
resolution x resolution) and ``.../metadata/<batch>.npy``, the layout of the LRA release
(``pathfinder32/``, ``pathfinder128/`` = Path-X). Specification: Linsley et al. (2018) and LRA
section 3.5; upstream generator drewlinsley/pathfinder ``snakes2.py`` with the parameters LRA
lists in google-research/long-range-arena ``lra_benchmarks/data/pathfinder.py`` (``PARAMS``
below; everything else at the wrapper's values: no single-paddle distractors, 4 retries per
distractor). The code is ours; it follows the
upstream procedure but not its pixel geometry, so the images are alike, not identical in style.

An image: two target contours start from seed points ``seed_distance`` pixels apart and each
grows ``contour_length`` paddles (line segments of ``paddle_length`` pixels, gap 2 * margin
between consecutive paddles, each turn drawn with weight cos(min(|turn| * continuity, pi/2))^2);
then ``(20 or 22 or 35 or 30) // distractor_length`` distractor contours of
``distractor_length = contour_length // 3`` paddles; every contour keeps at least ``margin``
empty pixels (Chebyshev distance) to every other contour. A contour that gets stuck takes back
its last paddles and draws other turns (a depth-first search; upstream redraws the whole image,
which at 32 x 32 with 14 paddles succeeds about once in a hundred draws); both target contours
are seeded first, then grown one after the other in random order. One marker (a disc of
``marker_radius``) sits on the seed end of a random target contour; label = randint(0, 2) decides
whether the second marker sits on the far end of the same contour (1, connected) or of the other
target contour (0). Paddles have intensity snake_contrast * paddle_contrast, markers 1, with
analytic antialiasing (coverage clip(half_width + 0.5 - distance, 0, 1); upstream draws at
``antialias_scale`` times the size and downsamples); the image is scaled so that its maximum is
255, as ``scipy.misc.imsave`` did upstream.

Cost (one core of the 2-core development machine, busy with other jobs): about 25 ms per 32 x 32
image at contour length 14 (12 ms at 6), 45 ms per 128 x 128 image; 200,000 Pathfinder-32 images
take about 80 CPU-minutes (``--workers`` splits them over processes) and about 1 GB of disk
(mostly file-system blocks of the small PNGs).

The generator also returns its contour mask (``make_sample``): every contour rasterised as a
connected 8-neighbour pixel path (paddles and gaps), -1 elsewhere; two contours never touch, so a
flood fill on the mask from one marker reaches the other iff label = 1 (the tests check this).

Determinism: sample ``i`` (global index; batch ``i // batch_size``, ``sample_{i % batch_size}``)
draws from ``numpy.random.default_rng([seed, resolution, contour_length, i])``, so the output is
the same for any number of worker processes.

Metadata: despite the ``.npy`` extension the LRA reader treats each file as text, one line per
image, fields separated by one space: subdir, file name, index in batch, label, continuity,
contour_length, distractor_length, paddle_length, paddle_thickness, margin,
len(paddle_contrast_list); e.g. ``imgs/0 sample_0.png 0 0 1.0 6 2 2 0.5 1 1``.

Splits (LRA ``image/input_pipeline.py``: ``[:80%]``, ``[80%:90%]``, ``[90%:]`` of the difficulty
folder): the metadata files in numeric batch order, lines in file order, split at
``n * 8 // 10`` and ``n * 9 // 10``; zero-byte images are skipped afterwards (LRA filters empty
images). LRA's order is TFDS's (a hash of the example keys); the examples are i.i.d., so taking
them in file order gives the same distribution.

Tokens: pixel value v (0-255) -> token v + 1; PAD = 0; VOCAB_SIZE = 257; row-major pixel order,
MAX_LEN = 32 * 32 (Path-X: pass resolution=128, 16384 tokens).

Manifest (``data/lra/__init__.py``): ``<difficulty>/manifest.json`` records source "generated",
``generator`` "data.lra.pathfinder", ``generator_version``, ``seed``, ``resolution``,
``difficulty`` and ``sizes`` {"num": images}; ``ensure`` with another seed or ``num`` regenerates
the folder (``workers`` and ``batch_size`` change no image and are not recorded). A release folder
found without a manifest is used as it is (its metadata line count becomes ``num``; asking for
another ``num`` is a ``DataMismatch``).
"""
import argparse
import math
import os
import time
from multiprocessing import Pool

import numpy as np

import data
from data.lra import prepare, token_dtype

NUM_CLASSES = 2
VOCAB_SIZE = 257  # pixel value v -> token v + 1; 0 = PAD
MAX_LEN = 32 * 32
TWO_TOWER = False
SPLITS = ("train", "val", "test")

DIFFICULTIES = {"curv_baseline": 6, "curv_contour_length_9": 9, "curv_contour_length_14": 14}
DEFAULT_DIFFICULTY = "curv_contour_length_14"  # LRA's "Path" / "Path-X" task (the hard split)

# LRA's generator settings per resolution (lra_benchmarks/data/pathfinder.py docstrings);
# paddle_length / paddle_contrast / padding / seed_distance default to the wrapper's 5 / [1.] / 22 / 27.
# distractors: num_distractor_snakes = distractors // distractor_length.
PARAMS = {
    32: dict(padding=1, paddle_length=2, paddle_thickness=0.5, marker_radius=1.5, seed_distance=7,
             continuity=1.0, margins=(1,), snake_contrast=(2.0,), paddle_contrast=(0.75,), distractors=20),
    64: dict(padding=1, paddle_length=5, paddle_thickness=1, marker_radius=2.5, seed_distance=12,
             continuity=1.8, margins=(1,), snake_contrast=(0.8,), paddle_contrast=(1.0,), distractors=22),
    128: dict(padding=1, paddle_length=5, paddle_thickness=1.5, marker_radius=3, seed_distance=20,
              continuity=1.8, margins=(2, 3), snake_contrast=(0.9,), paddle_contrast=(1.0,), distractors=35),
    256: dict(padding=22, paddle_length=5, paddle_thickness=2, marker_radius=5, seed_distance=27,
              continuity=1.8, margins=(3,), snake_contrast=(1.0,), paddle_contrast=(1.0,), distractors=30),
}
MAX_DISTRACTOR_RETRIES = 4  # the wrapper's max_distractor_contour_retrial
MAX_TARGET_ATTEMPTS = 10000  # whole two-contour draws before giving up (never reached in practice)
TARGET_BUDGET = 20  # paddles the depth-first search may place per paddle of a target contour
DISTRACTOR_BUDGET = 5  # the same for a distractor contour
GENERATOR_VERSION = 1  # raise when a change of the generator changes its images


def folder(lra_dir, resolution=32, difficulty=DEFAULT_DIFFICULTY):
    """``lra_dir/pathfinder{resolution}/{difficulty}`` (the release layout)."""
    return os.path.join(lra_dir, f"pathfinder{resolution}", difficulty)


# ---------------------------------------------------------------- generator

class _Canvas:
    """Contour occupancy of one image: ``owner`` (contour id, -1 empty) and ``step`` (paddle
    index of that contour), padded by ``B`` pixels of -1 so windows never leave the array."""

    B = 4  # >= the largest margin

    def __init__(self, resolution, padding, margin):
        self.R, self.pad, self.m = resolution, padding, margin
        n = resolution + 2 * self.B
        self.owner = np.full((n, n), -1, dtype=np.int32)
        self.step = np.zeros((n, n), dtype=np.int32)
        r = np.arange(-margin, margin + 1)
        self.window = np.stack(np.meshgrid(r, r, indexing="ij"), -1).reshape(-1, 2)

    def fits(self, pix, cid, k):
        """True iff pixels ``pix`` (n, 2) lie inside the padded border and keep ``margin`` empty
        pixels (Chebyshev distance) to every other contour and to contour ``cid``'s steps older
        than ``k - 1``."""
        return bool(self.fits_many(pix[None], cid, k)[0])

    def fits_many(self, pix, cid, k):
        """``fits`` for each of n candidates ``pix`` (n, p, 2): bool (n,). The forbidden pixels
        of the candidates' bounding box are dilated by ``margin`` (a square, done separably) and
        looked up."""
        lo, hi, m, B = self.pad, self.R - self.pad, self.m, self.B
        inside = ((pix >= lo) & (pix < hi)).all(axis=(1, 2))
        if not inside.any():
            return inside
        q = (pix if inside.all() else np.clip(pix, 0, self.R - 1)) + B
        y0, x0 = q[..., 0].min() - m, q[..., 1].min() - m
        y1, x1 = q[..., 0].max() + m + 1, q[..., 1].max() + m + 1
        own = self.owner[y0:y1, x0:x1]
        bad = (own >= 0) & ((own != cid) | (self.step[y0:y1, x0:x1] < k - 1))
        for axis in (0, 1):
            d = bad.copy()
            for s in range(1, m + 1):
                if axis == 0:
                    d[s:] |= bad[:-s]
                    d[:-s] |= bad[s:]
                else:
                    d[:, s:] |= bad[:, :-s]
                    d[:, :-s] |= bad[:, s:]
            bad = d
        return inside & ~bad[q[..., 0] - y0, q[..., 1] - x0].any(axis=1)

    def clear(self, pix):
        self.owner[pix[:, 0] + self.B, pix[:, 1] + self.B] = -1

    def put(self, pix, cid, k):
        self.owner[pix[:, 0] + self.B, pix[:, 1] + self.B] = cid
        self.step[pix[:, 0] + self.B, pix[:, 1] + self.B] = k

    def remove(self, cid):
        self.owner[self.owner == cid] = -1

    def free_pixels(self):
        """(n, 2) pixels inside the border at Chebyshev distance > margin from every contour."""
        occ = self.owner >= 0
        near = np.zeros_like(occ)
        n = occ.shape[0]
        for dy, dx in self.window:
            near[max(dy, 0):n + min(dy, 0), max(dx, 0):n + min(dx, 0)] |= \
                occ[max(-dy, 0):n + min(-dy, 0), max(-dx, 0):n + min(-dx, 0)]
        b, lo, hi = self.B, self.pad, self.R - self.pad
        return np.argwhere(~near[b + lo:b + hi, b + lo:b + hi]) + lo

    def mask(self):
        b = self.B
        return self.owner[b:b + self.R, b:b + self.R].astype(np.int16)


def _raster(a, b, step=0.25):
    """Pixels ((n, 2) int64, may repeat) of the segment a -> b, sampled every <= ``step`` px and
    rounded: consecutive pixels are 8-neighbours and both end points' pixels are included."""
    n = max(1, int(math.ceil(np.abs(b - a).max() / step)))
    t = np.linspace(0.0, 1.0, n + 1)[:, None]
    return np.rint(a + t * (b - a)).astype(np.int64)


def _unit(theta):
    return np.array([math.sin(theta), math.cos(theta)])


class _Contour:
    """A chain of paddles (upstream ``make_snake`` / ``extend_snake``, our geometry).

    Step k >= 1 goes from the previous paddle's end ``e`` straight on by ``margin`` to a pivot,
    turns by one of about 2 pi (paddle_length + margin) equally spaced angles, drawn with weight
    cos(min(|turn| * continuity, pi/2))^2 among the turns whose pixels fit (``_Canvas.fits``),
    goes ``margin`` more (the gap) and draws a paddle of ``paddle_length``. When no turn fits,
    the last paddle is taken back and another turn drawn there (depth-first search with at most
    ``budget`` paddles placed per contour); upstream instead redraws the whole image, which at
    32 x 32 with 14-paddle contours succeeds about once in a hundred draws.
    """

    def __init__(self, canvas, cid, p, rng):
        self.c, self.cid, self.p, self.rng = canvas, cid, p, rng
        self.paddles = []  # (start, end, contrast) of each paddle
        self.pixels = []  # pixels of each step
        self.states = []  # (end, theta) after each step
        L, m = p["paddle_length"], canvas.m
        n = max(8, int(math.ceil(2 * math.pi * (L + m))))
        self.turns = (np.arange(n) - n // 2) * (2 * math.pi / n)
        w = np.cos(np.minimum(np.abs(self.turns) * p["continuity"], math.pi / 2)) ** 2
        self.weights = np.where(w > 1e-9, w, 0.0)
        self.tb = np.linspace(0.0, 1.0, int(math.ceil((m + L) / 0.25)) + 1)  # pivot -> paddle end

    def _contrast(self, snake_contrast):
        pc = self.p["paddle_contrast"]
        return snake_contrast * pc[self.rng.integers(len(pc))]

    def _push(self, pix, start, end, theta, contrast):
        k = len(self.pixels)
        self.c.put(pix, self.cid, k)
        self.pixels.append(pix)
        self.paddles.append((start, end, contrast))
        self.states.append((end, theta))

    def _pop(self):
        pix = self.pixels.pop()
        self.paddles.pop()
        self.states.pop()
        self.c.clear(pix)
        self.c.put(self.pixels[-1], self.cid, len(self.pixels) - 1)  # the shared junction pixel

    @property
    def tip(self):
        return self.paddles[0][0]

    @property
    def end(self):
        return self.states[-1][0]

    def seed(self, tip, theta, snake_contrast):
        """First paddle from ``tip`` in direction ``theta``; False if it does not fit."""
        tip = np.asarray(tip, float)
        end = tip + self.p["paddle_length"] * _unit(theta)
        pix = _raster(tip, end)
        if not self.c.fits(pix, self.cid, 0):
            return False
        self._push(pix, tip, end, theta, self._contrast(snake_contrast))
        return True

    def _options(self):
        """Weights (0 = does not fit) and geometry of every turn from the current end."""
        end, theta = self.states[-1]
        L, m = self.p["paddle_length"], self.c.m
        pivot = end + m * _unit(theta)
        thetas = theta + self.turns
        u = np.stack([np.sin(thetas), np.cos(thetas)], 1)  # (n, 2)
        pix_a = _raster(end, pivot)
        pix_b = np.rint(pivot + self.tb[None, :, None] * (m + L) * u[:, None, :]).astype(np.int64)  # (n, nb, 2)
        both = np.concatenate([np.broadcast_to(pix_a, (len(u),) + pix_a.shape), pix_b], axis=1)
        ok = self.c.fits_many(both, self.cid, len(self.pixels))
        return {"w": self.weights * ok, "pivot": pivot, "u": u, "thetas": thetas, "pix_a": pix_a, "pix_b": pix_b}

    def grow(self, n_paddles, snake_contrast, budget):
        """Extend to ``n_paddles`` paddles; False (contour left as it was) when the search
        places ``budget`` paddles without getting there."""
        n0 = len(self.paddles)
        L, m = self.p["paddle_length"], self.c.m
        frames = [self._options()] if n0 < n_paddles else []
        placed = 0
        while len(self.paddles) < n_paddles:
            f = frames[-1]
            total = f["w"].sum()
            if total <= 0 or placed >= budget:
                if placed >= budget or len(self.paddles) == n0:
                    while len(self.paddles) > n0:
                        self._pop()
                    return False
                frames.pop()
                self._pop()
                continue
            i = int(np.searchsorted(np.cumsum(f["w"]), self.rng.random() * total, side="right"))
            i = min(i, len(f["w"]) - 1)
            f["w"][i] = 0.0
            placed += 1
            u = f["u"][i]
            pix = np.concatenate([f["pix_a"], f["pix_b"][i]])
            self._push(pix, f["pivot"] + m * u, f["pivot"] + (m + L) * u, f["thetas"][i],
                       self._contrast(snake_contrast))
            if len(self.paddles) < n_paddles:
                frames.append(self._options())
        return True


def _random_angle(rng):
    return int(rng.integers(-180, 180)) * math.pi / 180  # whole degrees, as upstream


def _two_targets(rng, p, R, margin, contour_length):
    """Both target contours (ids 0, 1), or None when they do not fit (the caller redraws)."""
    canvas = _Canvas(R, p["padding"], margin)
    sd = p["seed_distance"]
    lo, hi = min(2 * sd, R // 2), max(R - 2 * sd, R // 2 + 1)  # upstream keeps the first seed 2 sd from the edges
    contrast = list(p["snake_contrast"]) * 2
    contrast = [contrast[i] for i in rng.permutation(len(contrast))[:2]]
    t0 = rng.integers(lo, hi, size=2).astype(float)
    phi = int(rng.integers(0, 360)) * math.pi / 180
    t1 = np.rint(t0 + sd * _unit(phi))
    snakes = [_Contour(canvas, 0, p, rng), _Contour(canvas, 1, p, rng)]
    for s, tip, c in zip(snakes, (t0, t1), contrast):
        if not s.seed(tip, _random_angle(rng), c):
            return None
    for i in rng.permutation(2):  # which contour grows first
        if not snakes[i].grow(contour_length, contrast[i], TARGET_BUDGET * contour_length):
            return None
    return canvas, snakes


def _render(R, paddles, half_width, markers, radius):
    """Float image: max over paddles of coverage * contrast and over markers of disc coverage,
    coverage = clip(half_width + 0.5 - distance to the pixel centre, 0, 1)."""
    img = np.zeros((R, R))
    reach = max(half_width, radius) + 1.0
    for a, b, contrast, r in [(a, b, c, half_width) for a, b, c in paddles] + [(c, c, 1.0, radius) for c in markers]:
        y0, x0 = (max(0, int(math.floor(min(a[i], b[i]) - reach))) for i in (0, 1))
        y1, x1 = (min(R, int(math.ceil(max(a[i], b[i]) + reach)) + 1) for i in (0, 1))
        if y0 >= y1 or x0 >= x1:
            continue
        yy, xx = np.mgrid[y0:y1, x0:x1].astype(float)
        d = b - a
        t = np.clip(((yy - a[0]) * d[0] + (xx - a[1]) * d[1]) / max(d @ d, 1e-12), 0, 1)
        dist = np.hypot(yy - a[0] - t * d[0], xx - a[1] - t * d[1])
        img[y0:y1, x0:x1] = np.maximum(img[y0:y1, x0:x1], np.clip(r + 0.5 - dist, 0, 1) * contrast)
    return img


def make_sample(rng, resolution=32, contour_length=14):
    """One Pathfinder image.

    Args:
        rng: ``numpy.random.Generator``.
        resolution (int): 32, 64, 128 or 256 (``PARAMS``).
        contour_length (int): paddles per target contour (6, 9 or 14; ``DIFFICULTIES``).

    Returns:
        dict: ``image`` uint8 (R, R); ``label`` int (1 = the markers are on one contour);
        ``contours`` int16 (R, R), contour id per pixel (0 and 1 the targets, 2... distractors),
        -1 elsewhere; ``markers`` int64 (2, 2), the (row, col) pixels of the two marker centres
        (origin first), both on the mask; ``margin`` int, the paddle margin used.

    Raises:
        ValueError: unknown resolution.
        RuntimeError: no pair of target contours fits after MAX_TARGET_ATTEMPTS draws.
    """
    if resolution not in PARAMS:
        raise ValueError(f"resolution {resolution} not in {sorted(PARAMS)}")
    p = PARAMS[resolution]
    R = resolution
    label = int(rng.integers(0, 2))
    margin = int(p["margins"][rng.integers(len(p["margins"]))])
    for _ in range(MAX_TARGET_ATTEMPTS):
        out = _two_targets(rng, p, R, margin, contour_length)
        if out is not None:
            break
    else:
        raise RuntimeError(f"could not place two contours of {contour_length} paddles in {R}x{R}")
    canvas, snakes = out
    contrast = p["snake_contrast"]
    dl = contour_length // 3
    for j in range(p["distractors"] // dl):
        for _ in range(MAX_DISTRACTOR_RETRIES + 1):
            free = canvas.free_pixels()
            if len(free) == 0:
                break
            s = _Contour(canvas, 2 + j, p, rng)
            c = contrast[rng.integers(len(contrast))]
            if s.seed(free[rng.integers(len(free))], _random_angle(rng), c) and s.grow(dl, c, DISTRACTOR_BUDGET * dl):
                snakes.append(s)
                break
            canvas.remove(2 + j)
    origin = int(rng.integers(0, 2))
    terminal = origin if label else 1 - origin
    markers = [snakes[origin].tip, snakes[terminal].end]
    paddles = [pd for s in snakes for pd in s.paddles]
    img = _render(R, paddles, p["paddle_thickness"] / 2, markers, p["marker_radius"])
    image = np.rint(img * (255.0 / img.max())).astype(np.uint8)
    return {"image": image, "label": label, "contours": canvas.mask(),
            "markers": np.rint(np.array(markers)).astype(np.int64), "margin": margin}


def metadata_line(batch, j, label, resolution, contour_length, margin):
    """One metadata line in the release format (no newline)."""
    p = PARAMS[resolution]
    fields = [f"imgs/{batch}", f"sample_{j}.png", j, label, float(p["continuity"]), contour_length,
              contour_length // 3, p["paddle_length"], p["paddle_thickness"], margin, len(p["paddle_contrast"])]
    return " ".join(str(f) for f in fields)


def _batch_job(args):
    root, batch, start, stop, seed, resolution, contour_length, batch_size = args
    from PIL import Image

    os.makedirs(os.path.join(root, "imgs", str(batch)), exist_ok=True)
    lines = []
    for i in range(start, stop):
        s = make_sample(np.random.default_rng([seed, resolution, contour_length, i]), resolution, contour_length)
        j = i - batch * batch_size
        Image.fromarray(s["image"], mode="L").save(os.path.join(root, "imgs", str(batch), f"sample_{j}.png"))
        lines.append(metadata_line(batch, j, s["label"], resolution, contour_length, s["margin"]) + "\n")

    def write(tmp):
        with open(tmp, "w") as f:
            f.writelines(lines)
    data.atomic_write(os.path.join(root, "metadata", f"{batch}.npy"), write)
    return stop - start


def generate(out_dir, num, resolution=32, difficulty=DEFAULT_DIFFICULTY, seed=0, workers=1,
             batch_size=1000, progress=True, replace=False):
    """Write ``num`` images in the release layout to ``out_dir/<difficulty>/``, with its manifest.

    Everything is written into a temporary folder beside it, manifest last, and renamed into
    place at the end (``data.build_folder``), so the folder appears complete or not at all.

    Args:
        workers (int): processes (``multiprocessing.Pool`` over batches); 1 = this process.
            The output does not depend on it.
        replace (bool): an existing ``out_dir/<difficulty>`` is replaced (after the new one is
            complete) instead of raising FileExistsError.

    Returns:
        dict: the manifest written (``expected_manifest``).

    Raises:
        ValueError: unknown difficulty / resolution, num < 1 or batch_size < 1.
        FileExistsError: ``out_dir/<difficulty>`` exists already and not ``replace``.
    """
    _check_generate_options(num, resolution, difficulty, batch_size)
    final = os.path.join(out_dir, difficulty)
    if os.path.exists(final) and not replace:
        raise FileExistsError(f"{final} exists; delete it to generate it again")
    return data.build_folder(final, lambda tmp: _generate_into(tmp, num, resolution, difficulty, seed, workers,
                                                               batch_size, progress),
                             lambda _: expected_manifest(resolution, difficulty, num, seed))


def _check_generate_options(num, resolution, difficulty, batch_size):
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"unknown difficulty {difficulty!r}; available: {', '.join(DIFFICULTIES)}")
    if resolution not in PARAMS:
        raise ValueError(f"resolution {resolution} not in {sorted(PARAMS)}")
    if num < 1 or batch_size < 1:
        raise ValueError(f"num ({num}) and batch_size ({batch_size}) must be positive")


def _generate_into(target, num, resolution, difficulty, seed, workers, batch_size, progress=True):
    """Write the images and metadata of ``generate`` into the (empty) folder ``target``."""
    from tqdm import tqdm

    _check_generate_options(num, resolution, difficulty, batch_size)
    os.makedirs(os.path.join(target, "metadata"), exist_ok=True)
    cl = DIFFICULTIES[difficulty]
    jobs = [(target, b, b * batch_size, min(num, (b + 1) * batch_size), seed, resolution, cl, batch_size)
            for b in range(-(-num // batch_size))]
    with tqdm(total=num, unit="img", desc=f"pathfinder{resolution}/{difficulty}", disable=not progress) as bar:
        if workers > 1:
            with Pool(workers) as pool:
                for n in pool.imap_unordered(_batch_job, jobs):
                    bar.update(n)
        else:
            for job in jobs:
                bar.update(_batch_job(job))


def expected_manifest(resolution=32, difficulty=DEFAULT_DIFFICULTY, num=200000, seed=0):
    """The manifest fields that identify generated images (see the module docstring)."""
    return {"dataset": f"LRA Pathfinder{resolution}", "source": "generated", "generator": "data.lra.pathfinder",
            "generator_version": GENERATOR_VERSION, "seed": int(seed), "resolution": int(resolution),
            "difficulty": difficulty, "sizes": {"num": int(num)}}


def _metadata_files(directory):
    meta = os.path.join(directory, "metadata")
    return [f for f in os.listdir(meta) if f.endswith(".npy")] if os.path.isdir(meta) else []


def _found(directory, resolution, difficulty):
    """Manifest of a release folder present without a manifest, None when the folder is absent."""
    names = _metadata_files(directory)
    if not names:
        if os.path.isdir(directory) and os.listdir(directory):
            raise data.DataFormatError(directory, "a Pathfinder folder needs metadata/*.npy (an interrupted copy?); "
                                       "complete the copy or delete the folder to generate it")
        return None
    num = 0
    for name in names:
        with open(os.path.join(directory, "metadata", name), "rb") as f:
            num += sum(1 for line in f if line.strip())
    return {"dataset": f"LRA Pathfinder{resolution}", "resolution": int(resolution), "difficulty": difficulty,
            "sizes": {"num": num}}


def ensure(lra_dir, resolution=32, difficulty=DEFAULT_DIFFICULTY, num=200000, seed=0, workers=None,
           batch_size=1000, replace=True):
    """Make ``lra_dir/pathfinder{resolution}/{difficulty}/`` hold the asked images: nothing to do
    when its manifest matches (or a release folder is there, see the module docstring), else
    generate ``num`` images (LRA: 200,000 per difficulty, 160k / 20k / 20k after the split),
    replacing an earlier generation.

    Args:
        workers (int or None): processes; None = ``os.cpu_count()``. Neither it nor
            ``batch_size`` (images per metadata file) changes an image.
        replace (bool): False: images generated with other options are kept and refused
            (``data.DataMismatch``) instead of being generated again.

    Returns:
        dict: the folder's manifest.

    Raises:
        ValueError: unknown resolution or difficulty, num < 1.
        data.DataFormatError: the folder exists without manifest and metadata (an interrupted copy).
        data.DataMismatch: a release folder found in place holds another number of images, or
            (not ``replace``) the folder was generated with other options.
    """
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"unknown difficulty {difficulty!r}; available: {', '.join(DIFFICULTIES)}")
    if resolution not in PARAMS:
        raise ValueError(f"resolution {resolution} not in {sorted(PARAMS)}")
    d = folder(lra_dir, resolution, difficulty)

    def build(directory):
        _generate_into(directory, num, resolution, difficulty, seed, workers or os.cpu_count() or 1, batch_size)

    return prepare(d, expected_manifest(resolution, difficulty, num, seed), build,
                   f"LRA Pathfinder{resolution}/{difficulty}", found=lambda x: _found(x, resolution, difficulty),
                   rebuild=replace)


def options_of(manifest):
    """The ``ensure`` options (train.py's ``lra_options`` entries) that ask for what ``manifest``
    describes: resolution, difficulty, the number of images and the seed when it is known."""
    options = {k: manifest[k] for k in ("resolution", "difficulty", "seed") if k in manifest}
    if "num" in (manifest.get("sizes") or {}):
        options["num"] = int(manifest["sizes"]["num"])
    return options


def manifest(lra_dir, resolution=32, difficulty=DEFAULT_DIFFICULTY):
    """The manifest of ``lra_dir/pathfinder{resolution}/{difficulty}/`` (None if there is none)."""
    return data.read_manifest(folder(lra_dir, resolution, difficulty))


# ---------------------------------------------------------------- loader

def read_metadata(root):
    """All metadata lines of a difficulty folder, in order.

    Returns:
        list of (metadata file, line number, image path, label int), files in numeric batch
        order (``0.npy, 1.npy, ..., 10.npy``), lines in file order.

    Raises:
        FileNotFoundError: no ``metadata/*.npy``.
        data.DataFormatError: a line that is not UTF-8, has fewer than 4 fields or a label not
            0 / 1, naming file and line.
    """
    meta = os.path.join(root, "metadata")
    names = [f for f in os.listdir(meta) if f.endswith(".npy")] if os.path.isdir(meta) else []
    if not names:
        raise FileNotFoundError(f"no metadata/*.npy under {root}; data.lra.pathfinder.ensure generates it "
                                f"(or put the LRA release's pathfinder folder there)")
    names.sort(key=lambda f: (0, int(f[:-4])) if f[:-4].isdigit() else (1, f))
    rows = []
    for name in names:
        file = os.path.join(meta, name)
        with open(file, "rb") as f:
            for line, raw in enumerate(f, start=1):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise data.DataFormatError(file, f"not UTF-8 text ({e.reason}); metadata lines are ASCII",
                                               line=line, content=raw) from None
                fields = text.rstrip("\r\n").split(" ")
                if len(fields) < 4:
                    raise data.DataFormatError(file, f"expected at least 4 space-separated fields (subdir, file, "
                                               f"index, label, ...), got {len(fields)}", line=line, content=text)
                if fields[3] not in ("0", "1"):
                    raise data.DataFormatError(file, f"label {fields[3]!r} is not 0 or 1 (the 4th field)",
                                               line=line, content=text)
                rows.append((file, line, os.path.join(root, fields[0], fields[1]), int(fields[3])))
    return rows


def load(lra_dir, split, max_len=MAX_LEN, resolution=32, difficulty=DEFAULT_DIFFICULTY):
    """Read one split of ``lra_dir/pathfinder{resolution}/{difficulty}/``.

    Args:
        split: "train" (first 80% of the metadata lines), "val" (next 10%), "test" (last 10%).
        max_len (int): pixel sequences (row-major) truncated / right-padded (PAD = 0) to it.

    Returns:
        dict with ``tokens`` uint16 (N, max_len) (pixel value + 1), ``lengths`` int64 (N,)
        (min(resolution**2, max_len)), ``labels`` int64 (N,) in {0, 1}.

    Raises:
        ValueError: bad split.
        FileNotFoundError: no metadata (``ensure`` generates it).
        data.DataFormatError: a malformed metadata line, an image that is missing, unreadable,
            not 8-bit grayscale or not resolution x resolution (naming the metadata file and line).
    """
    from PIL import Image

    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; available: {', '.join(SPLITS)}")
    rows = read_metadata(folder(lra_dir, resolution, difficulty))
    n = len(rows)
    a, b = {"train": (0, n * 8 // 10), "val": (n * 8 // 10, n * 9 // 10), "test": (n * 9 // 10, n)}[split]
    rows = [r for r in rows[a:b] if not (os.path.exists(r[2]) and os.path.getsize(r[2]) == 0)]  # LRA drops empty images
    length = min(resolution * resolution, max_len)
    tokens = np.zeros((len(rows), max_len), dtype=token_dtype(VOCAB_SIZE))
    labels = np.empty(len(rows), dtype=np.int64)
    for i, (file, line, img_path, label) in enumerate(rows):
        try:
            with Image.open(img_path) as im:
                if im.mode != "L" or im.size != (resolution, resolution):
                    raise ValueError(f"mode {im.mode} size {im.size}, expected L (8-bit grayscale) "
                                     f"{resolution}x{resolution}")
                pix = np.asarray(im, dtype=np.uint8).reshape(-1)
        except (OSError, ValueError) as e:
            raise data.DataFormatError(file, f"image {img_path}: {e}", line=line) from None
        tokens[i, :length] = pix[:length]
        tokens[i, :length] += 1
        labels[i] = label
    return {"tokens": tokens, "lengths": np.full(len(rows), length, dtype=np.int64), "labels": labels}


def main(argv=None):
    ap = data.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lra_dir", default=None, help="the LRA root, as train.py's --lra_dir: images go to "
                    "LRA_DIR/pathfinder<resolution>/<difficulty>/ (default: $LRA_DIR, else data/lra/files)")
    ap.add_argument("--resolution", type=int, default=32, choices=sorted(PARAMS))
    ap.add_argument("--difficulty", default=DEFAULT_DIFFICULTY, choices=list(DIFFICULTIES))
    ap.add_argument("--num", type=int, default=200000, help="images (LRA: 200,000 per difficulty)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes (output does not depend on it)")
    ap.add_argument("--batch_size", type=int, default=1000, help="images per imgs/<batch>/ folder and metadata file")
    a = ap.parse_args(argv)
    for name in ("num", "workers", "batch_size"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be at least 1, got {getattr(a, name)}")
    from data.lra import default_lra_dir

    lra_dir = a.lra_dir or default_lra_dir()
    t0 = time.time()
    with data.command_errors():
        m = ensure(lra_dir, a.resolution, a.difficulty, a.num, a.seed, a.workers, a.batch_size, replace=False)
    dt = time.time() - t0
    print(f"{folder(lra_dir, a.resolution, a.difficulty)}: {m['sizes']['num']:,} images ({m['source']}, "
          f"seed {m.get('seed', 'unknown')}), {dt:.1f} s with {a.workers} worker(s)")


if __name__ == "__main__":
    main()
