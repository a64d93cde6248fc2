"""LRA data modules text (byte IMDB), image (CIFAR-10 gray) and retrieval (AAN tsv): on the real
sources of $IMDB_DIR / $CIFAR10_DIR, else the small subsets in ../shared (the fixtures ``imdb_dir``,
``cifar10_dir`` of tests/conftest.py; skipped, naming the variable, when neither exists; the tests
pass the paths explicitly, the product code never looks in ../shared), and on files the tests
write, malformed ones included."""
import os
import pickle
import tarfile

import numpy as np
import pytest

import data
from data.lra import image, retrieval, text, token_dtype


@pytest.fixture(autouse=True)
def no_env(monkeypatch):
    monkeypatch.delenv("IMDB_DIR", raising=False)
    monkeypatch.delenv("CIFAR10_DIR", raising=False)


def check_interface(module, d, max_len, n_classes):
    assert d["tokens"].dtype == token_dtype(module.VOCAB_SIZE) and d["tokens"].shape == (len(d["labels"]), max_len)
    assert d["lengths"].dtype == np.int64 and d["labels"].dtype == np.int64
    assert d["tokens"].min() >= 0 and d["tokens"].max() < module.VOCAB_SIZE
    assert ((d["tokens"] != 0).sum(1) == d["lengths"]).all()  # real tokens are never 0, padding always
    assert set(np.unique(d["labels"])) <= set(range(n_classes))


# ---------------------------------------------------------------- text


def imdb_reviews(source):
    """{(split, sentiment): {review id: file}} of an aclImdb source (a directory or tarball, as
    text.find_source reads it), and a function file -> its bytes."""
    kind, path = text.find_source(source)
    if kind == "tar":
        archive = tarfile.open(path)
        names, read = archive.getnames(), (lambda name: archive.extractfile(name).read())
    else:
        names = [os.path.relpath(os.path.join(d, f), path).replace(os.sep, "/") for d, _, files in os.walk(path)
                 for f in files]

        def read(name):
            with open(os.path.join(path, name), "rb") as f:
                return f.read()
    reviews = {}
    for name in names:
        m = text.MEMBER.search(name)
        if m and text.NAME.fullmatch(m.group(3)):
            reviews.setdefault((m.group(1), m.group(2)), {})[int(m.group(3).split("_")[0])] = name
    return reviews, read


def test_text_from_the_real_subset(tmp_path, imdb_dir):
    text.ensure(str(tmp_path), imdb_source=imdb_dir)  # the subset: 100 reviews per class and split
    reviews, read = imdb_reviews(imdb_dir)
    n = {key: len(ids) for key, ids in reviews.items()}
    n_val = [round(text.VAL_FRACTION * n["train", s]) for s in ("neg", "pos")]  # the subset: 10, 10
    n_train, n_test = n["train", "neg"] + n["train", "pos"], n["test", "neg"] + n["test", "pos"]
    splits = {s: text.load(str(tmp_path), s, 1000) for s in text.SPLITS}
    for d in splits.values():
        check_interface(text, d, 1000, 2)
    # the subset: [180, 20, 200]
    assert [len(splits[s]["labels"]) for s in text.SPLITS] == [n_train - sum(n_val), sum(n_val), n_test]
    assert np.bincount(splits["val"]["labels"]).tolist() == n_val  # class-balanced hold-out
    # byte ids: the first test review is the neg one of the lowest id (test/neg/0_2.txt)
    raw = read(reviews["test", "neg"][min(reviews["test", "neg"])])
    d = splits["test"]
    assert d["labels"][0] == 0 and d["lengths"][0] == min(len(raw), 1000)
    assert bytes((d["tokens"][0, :d["lengths"][0]] - 1).astype(np.uint8).tolist()) == raw[:1000]
    long = text.load(str(tmp_path), "test", 4000)
    assert long["tokens"].shape == (n_test, 4000) and (long["lengths"] >= d["lengths"]).all()
    lra_style = text.load(str(tmp_path), "val", 1000, val="test")  # LRA: val = the test set
    assert np.array_equal(lra_style["tokens"], d["tokens"])
    every = text.load(str(tmp_path), "train", 1000, val="test")
    assert len(every["labels"]) == n_train
    # the hold-out and train split the training reviews: disjoint (by review; the full IMDB holds a few
    # duplicate texts, so a review of the hold-out can equal another one in train)
    assert sorted(r.tobytes() for s in ("train", "val") for r in splits[s]["tokens"]) == sorted(
        r.tobytes() for r in every["tokens"])
    if len({r.tobytes() for r in every["tokens"]}) == n_train:  # no duplicate texts (the subset)
        train_rows = {r.tobytes() for r in splits["train"]["tokens"]}
        assert not any(r.tobytes() in train_rows for r in splits["val"]["tokens"])


def write_imdb(root, files):
    for rel, body in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(body)


GOOD = {"train/pos/0_9.txt": b"great", "train/neg/0_1.txt": b"awful", "train/pos/1_8.txt": b"fine film",
        "train/neg/1_3.txt": b"boring", "test/pos/0_10.txt": b"superb", "test/neg/0_2.txt": b"bad"}


def test_text_malformed_sources_name_the_file(tmp_path):
    src = tmp_path / "src"
    write_imdb(src, {**GOOD, "train/pos/2_3.txt": b"a neg rating under pos/"})
    with pytest.raises(ValueError, match=r"2_3\.txt.*rating 3"):
        text.ensure(str(tmp_path / "lra"), imdb_source=str(src))
    src2 = tmp_path / "src2"
    write_imdb(src2, {**GOOD, "test/neg/notes.txt": b"x"})
    with pytest.raises(ValueError, match=r"notes\.txt.*<id>_<rating>"):
        text.ensure(str(tmp_path / "lra"), imdb_source=str(src2))
    src3 = tmp_path / "src3"
    write_imdb(src3, {k: v for k, v in GOOD.items() if "test/pos" not in k})
    with pytest.raises(FileNotFoundError, match=r"src3/test/pos missing"):
        text.ensure(str(tmp_path / "lra"), imdb_source=str(src3))
    (src3 / "test" / "pos").mkdir()
    with pytest.raises(ValueError, match="test split has 1 neg and 0 pos"):
        text.ensure(str(tmp_path / "lra"), imdb_source=str(src3))
    with pytest.raises(FileNotFoundError, match="holds no IMDB data"):
        text.ensure(str(tmp_path / "lra"), imdb_source=str(tmp_path / "nothing"))
    assert not os.path.exists(text.cache_path(str(tmp_path / "lra"), "train"))  # nothing half-written
    with pytest.raises(FileNotFoundError, match=r"imdb/train\.npz"):
        text.load(str(tmp_path / "lra"), "train")


def test_text_tarball_and_corrupt_cache(tmp_path):
    import tarfile

    src = tmp_path / "src" / "aclImdb"
    write_imdb(src, GOOD)
    tar = tmp_path / "aclImdb_small.tar.gz"
    with tarfile.open(tar, "w:gz") as t:
        t.add(src, arcname="aclImdb")
    lra_dir = str(tmp_path / "lra")
    text.ensure(lra_dir, imdb_source=str(tar))
    test = text.load(lra_dir, "test", 8)
    assert test["labels"].tolist() == [0, 1] and test["lengths"].tolist() == [3, 6]
    assert bytes((test["tokens"][1, :6] - 1).astype(np.uint8).tolist()) == b"superb"
    cache = text.cache_path(lra_dir, "test")
    with open(cache, "wb") as f:
        f.write(b"not a zip file")
    with pytest.raises(ValueError, match=r"imdb/test\.npz.*unreadable"):
        text.load(lra_dir, "test")
    bad_tar = tmp_path / "imdb_bad.tar.gz"
    bad_tar.write_bytes(b"\x1f\x8b garbage")
    with pytest.raises(ValueError, match="imdb_bad.tar.gz"):
        text.ensure(str(tmp_path / "lra2"), imdb_source=str(bad_tar))


# ---------------------------------------------------------------- image


def tf_gray_reference(rgb):
    """Independent per-pixel reference of tf.image.rgb_to_grayscale on uint8 (float64 here)."""
    r, g, b = (c.astype(np.float64) for c in rgb)
    return np.floor(255.5 * (0.2989 * r + 0.5870 * g + 0.1140 * b) / 255).astype(np.int64)


def test_image_from_the_real_subset(tmp_path, cifar10_dir):
    image.ensure(str(tmp_path), cifar10_source=cifar10_dir)
    kind, source = image.find_source(cifar10_dir)
    splits = {s: image.load(str(tmp_path), s) for s in image.SPLITS}
    for d in splits.values():
        check_interface(image, d, 1024, 10)
    sizes = [900, 100, 1000] if kind == "subset" else [45000, 5000, 10000]  # the full python batches
    assert [len(splits[s]["labels"]) for s in image.SPLITS] == sizes
    assert splits["train"]["labels"][:10].tolist() == [6, 9, 9, 4, 1, 1, 2, 7, 8, 3]  # SOURCE.md
    assert splits["test"]["labels"][:4].tolist() == [3, 8, 8, 0]
    if kind == "subset":
        with np.load(source) as z:
            rgb = z["train_data_batch_1_first1000"][:50]
    else:
        rgb = image.read_batch(os.path.join(source, image.TRAIN_BATCHES[0]))[0][:50]
    ours = splits["train"]["tokens"][:50] - 1
    ref = np.stack([tf_gray_reference(im.reshape(3, 1024)) for im in rgb])
    assert np.abs(ours - ref).max() <= 1 and (ours == ref).mean() > 0.999
    short = image.load(str(tmp_path), "val", 100)
    assert short["tokens"].shape == (sizes[1], 100) and (short["lengths"] == 100).all()


def write_batches(root, n=10, skip=(), bad=None):
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    for name in image.TRAIN_BATCHES + (image.TEST_BATCH,):
        if name in skip:
            continue
        d = {b"batch_label": name.encode(), b"labels": [i % 10 for i in range(n)],
             b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)}
        if name == bad:
            d[b"data"] = d[b"data"][:, :100]
        with open(root / name, "wb") as f:
            pickle.dump(d, f, protocol=2)


def test_image_from_python_batches_and_malformed_ones(tmp_path):
    src = tmp_path / "cifar-10-batches-py"
    write_batches(src)
    lra_dir = str(tmp_path / "lra")
    image.ensure(lra_dir, cifar10_source=str(tmp_path))  # finds the cifar-10-batches-py/ folder
    d = {s: image.load(lra_dir, s) for s in image.SPLITS}
    assert [len(d[s]["labels"]) for s in image.SPLITS] == [45, 5, 10]  # 90% / 10% of 5 x 10, test
    with open(src / "data_batch_1", "rb") as f:
        first = pickle.load(f, encoding="bytes")[b"data"][0]
    assert np.array_equal(d["train"]["tokens"][0] - 1, image.to_gray(first[None])[0])
    assert d["train"]["labels"][:12].tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]

    write_batches(tmp_path / "bad", bad="data_batch_4")
    with pytest.raises(ValueError, match=r"data_batch_4.*\(N, 3072\)"):
        image.ensure(str(tmp_path / "lra2"), cifar10_source=str(tmp_path / "bad"))
    write_batches(tmp_path / "gap", skip=("data_batch_3",))
    with pytest.raises(FileNotFoundError, match="data_batch_3"):
        image.ensure(str(tmp_path / "lra3"), cifar10_source=str(tmp_path / "gap"))
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "test_batch").write_bytes(b"junk")
    for name in image.TRAIN_BATCHES:
        (tmp_path / "junk" / name).write_bytes(b"junk")
    with pytest.raises(ValueError, match="data_batch_1: not a readable CIFAR-10 pickle"):
        image.ensure(str(tmp_path / "lra4"), cifar10_source=str(tmp_path / "junk"))
    np.savez(tmp_path / "lra" / "cifar10" / "test.npz", gray=np.zeros((3, 1000), np.uint8), labels=np.zeros(3))
    with pytest.raises(ValueError, match=r"cifar10/test\.npz: malformed"):
        image.load(lra_dir, "test")


# ---------------------------------------------------------------- retrieval


def write_tsv(lra_dir, split, lines):
    d = os.path.join(lra_dir, "tsv_data")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, retrieval.FILES[split]), "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


PAIRS = ["1.0\taan/P01-1001\taan/P02-2002\tWe cite the parser.\tA parser paper, 2002.",
         "0.0\taan/P03-1003\taan/P04-2004\tDépendance grammar\tUnrelated text here",
         "1\taan/P05-1005\taan/P06-2006\tshort\ta much longer second document " + "x" * 50]


def test_retrieval_reads_the_release_tsv(tmp_path):
    lra_dir = str(tmp_path)
    for split in retrieval.SPLITS:
        write_tsv(lra_dir, split, PAIRS)
    retrieval.ensure(lra_dir)
    d = retrieval.load(lra_dir, "val", 20)
    assert set(d) == {"tokens", "tokens2", "lengths", "lengths2", "labels"}
    assert d["tokens"].shape == d["tokens2"].shape == (3, 20) and d["labels"].tolist() == [1, 0, 1]
    for key in ("", "2"):
        check_interface(retrieval, {"tokens": d["tokens" + key], "lengths": d["lengths" + key],
                                    "labels": d["labels"]}, 20, 2)
    assert d["lengths"].tolist() == [19, 19, 5] and d["lengths2"].tolist() == [20, 19, 20]
    assert bytes((d["tokens"][1, :19] - 1).astype(np.uint8).tolist()) == "Dépendance grammar".encode()
    assert retrieval.TWO_TOWER and retrieval.load(lra_dir, "train")["tokens"].shape == (3, 4000)


def test_retrieval_malformed_and_missing_files(tmp_path):
    lra_dir = str(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"new_aan_pairs\.train\.tsv.*new_aan_pairs\.eval\.tsv.*lra_release"):
        retrieval.ensure(lra_dir)
    write_tsv(lra_dir, "train", PAIRS)
    with pytest.raises(FileNotFoundError, match=r"new_aan_pairs\.eval\.tsv"):
        retrieval.load(lra_dir, "val")
    cases = [("1.0\tid1\tid2\tonly four fields", "line 2: expected 5 tab-separated fields"),
             ("2.0\tid1\tid2\ta\tb", "line 2: the label .* must be 0 or 1; got b'2.0'"),
             ("yes\tid1\tid2\ta\tb", "line 2: the label .* must be a number"),
             ("0.0\tid1\tid2\t\tb", "line 2: empty text1")]
    for bad, message in cases:
        write_tsv(lra_dir, "test", [PAIRS[0], bad])
        with pytest.raises(data.DataFormatError, match=rf"new_aan_pairs\.test\.tsv, {message}") as e:
            retrieval.load(lra_dir, "test")
        assert "\n" not in str(e.value)
    write_tsv(lra_dir, "test", [PAIRS[0], PAIRS[2]])
    with pytest.raises(ValueError, match=r"new_aan_pairs\.test\.tsv: 0 pairs of class 0"):
        retrieval.load(lra_dir, "test")

