"""Manifests of the prepared LRA data (issue 23): prepared data are reused only when they are what
the options ask for, release files found in place are kept, data errors are one line naming the
file, Retrieval reads bytes into compact arrays, CIFAR-10 comes by the standard library, and no
product code looks in ../shared. Every case uses a few examples: each test takes seconds."""
import hashlib
import io
import json
import os
import pickle
import tarfile

import numpy as np
import pytest

import data
import train
from configurator import ConfigError
from data.lra import FOUND_IN_PLACE, image, listops, pathfinder, retrieval, text
from tasks import classify


@pytest.fixture(autouse=True)
def no_env(monkeypatch):
    for name in ("IMDB_DIR", "CIFAR10_DIR", "LRA_DIR"):
        monkeypatch.delenv(name, raising=False)


def mtimes(folder):
    return {f: os.stat(os.path.join(d, f)).st_mtime_ns for d, _, names in os.walk(folder) for f in names
            if f != data.MANIFEST}


# ---------------------------------------------------------------- Pathfinder


def test_pathfinder_ensure_rebuilds_when_num_or_seed_differ(tmp_path):
    lra_dir = str(tmp_path)
    folder = pathfinder.folder(lra_dir)
    m = pathfinder.ensure(lra_dir, num=4, seed=0, workers=1, batch_size=2)
    assert m["source"] == "generated" and m["sizes"] == {"num": 4} and m["seed"] == 0
    assert data.read_manifest(folder) == m
    assert m["resolution"] == 32 and m["difficulty"] == pathfinder.DEFAULT_DIFFICULTY
    first = mtimes(folder)
    # options that change no image: nothing is rebuilt
    pathfinder.ensure(lra_dir, num=4, seed=0, workers=2, batch_size=3)
    assert mtimes(folder) == first
    # another num: regenerated (the 20k CPU folder was returned for num=200000 before)
    m = pathfinder.ensure(lra_dir, num=6, seed=0, workers=1, batch_size=2)
    assert m["sizes"] == {"num": 6}
    assert sorted(os.listdir(os.path.join(folder, "metadata"))) == ["0.npy", "1.npy", "2.npy"]
    n = sum(len(pathfinder.load(lra_dir, s)["labels"]) for s in pathfinder.SPLITS)
    assert n == 6
    images = {f: open(os.path.join(folder, "imgs", "0", f), "rb").read() for f in ("sample_0.png", "sample_1.png")}
    m = pathfinder.ensure(lra_dir, num=6, seed=1, workers=1, batch_size=2)
    assert m["seed"] == 1
    assert any(open(os.path.join(folder, "imgs", "0", f), "rb").read() != b for f, b in images.items())
    assert not [f for f in os.listdir(os.path.dirname(folder)) if ".tmp." in f or ".old." in f]


def test_pathfinder_release_found_in_place_is_kept(tmp_path):
    lra_dir = str(tmp_path)
    pathfinder.ensure(lra_dir, num=3, seed=0, workers=1, batch_size=2)
    folder = pathfinder.folder(lra_dir)
    os.remove(os.path.join(folder, data.MANIFEST))  # as the LRA release comes
    before = mtimes(folder)
    m = pathfinder.ensure(lra_dir, num=3, seed=7, workers=1)  # the seed of a release is unknown: not compared
    assert m["source"] == FOUND_IN_PLACE and m["sizes"] == {"num": 3} and "seed" not in m
    assert data.read_manifest(folder)["source"] == FOUND_IN_PLACE and mtimes(folder) == before
    with pytest.raises(data.DataMismatch, match=r"sizes: prepared \{'num': 3\}, asked \{'num': 5\}") as e:
        pathfinder.ensure(lra_dir, num=5, workers=1)
    assert "\n" not in str(e.value) and mtimes(folder) == before
    # a folder without metadata (an interrupted copy) is neither used nor overwritten
    other = pathfinder.folder(lra_dir, difficulty="curv_baseline")
    os.makedirs(os.path.join(other, "imgs"))
    with pytest.raises(data.DataFormatError, match="metadata"):
        pathfinder.ensure(lra_dir, difficulty="curv_baseline", num=2, workers=1)


# ---------------------------------------------------------------- ListOps

SIZES = dict(num_train=6, num_val=2, num_test=2)


def test_listops_ensure_regenerates_for_other_options_and_keeps_release_files(tmp_path):
    lra_dir = str(tmp_path)
    folder = os.path.join(lra_dir, listops.FOLDER)
    m = listops.ensure(lra_dir, seed=0, workers=1, **SIZES)
    assert m["source"] == "generated" and m["generator"] == "data.lra.listops" and m["seed"] == 0
    assert m["sizes"] == {"train": 6, "val": 2, "test": 2}
    first = open(listops.path(lra_dir, "train"), "rb").read()
    listops.ensure(lra_dir, seed=0, workers=2, **SIZES)
    assert open(listops.path(lra_dir, "train"), "rb").read() == first
    m = listops.ensure(lra_dir, seed=0, workers=1, num_train=8, num_val=2, num_test=2)
    assert m["sizes"]["train"] == 8 and len(listops.load(lra_dir, "train")["labels"]) == 8
    m = listops.ensure(lra_dir, seed=1, workers=1, num_train=8, num_val=2, num_test=2)
    assert m["seed"] == 1 and open(listops.path(lra_dir, "train"), "rb").read()[:300] != first[:300]
    # files without a manifest (the release): counted, kept, other sizes refused with both values
    os.remove(os.path.join(folder, data.MANIFEST))
    m = listops.ensure(lra_dir, seed=3, workers=1, num_train=8, num_val=2, num_test=2)
    assert m["source"] == FOUND_IN_PLACE and m["sizes"] == {"train": 8, "val": 2, "test": 2}
    with pytest.raises(data.DataMismatch, match="'train': 8.*'train': 9"):
        listops.ensure(lra_dir, workers=1, num_train=9, num_val=2, num_test=2)


def test_malformed_listops_file_is_one_line_naming_file_and_line(tmp_path):
    lra_dir = str(tmp_path)
    folder = tmp_path / listops.FOLDER
    folder.mkdir()
    row = "( ( [MAX 1 ) 2 ) ] )" + " ( [MIN 3 ) 4 ]" * 400 + "\t2"  # a 6 KB row where the header should be
    assert len(row) > 5000
    (folder / "basic_val.tsv").write_text(row + "\r\n" + row + "\r\n", newline="")
    with pytest.raises(data.DataFormatError) as e:
        listops.load(lra_dir, "val")
    message = str(e.value)
    assert message.startswith(f"{folder / 'basic_val.tsv'}, line 1: expected the header 'Source<TAB>Target'")
    assert "\n" not in message and len(message) < 300 and "characters)" in message  # the quote is capped
    (folder / "basic_val.tsv").write_text("Source\tTarget\r\n" + "( ( [MAX 1 ) 2 ) ] )\t2\r\n" +
                                          "( ( [MAX 1 ) 2 ) ] )\t2\tthird" + "x" * 3000 + "\r\n", newline="")
    with pytest.raises(data.DataFormatError, match=r"basic_val\.tsv, line 3: expected 2 tab-separated") as e:
        listops.load(lra_dir, "val")
    assert "\n" not in str(e.value) and len(str(e.value)) < 300
    # through the task, a DataError (train.py: one `error:` line, exit 2), not a traceback
    cfg = dict(train.DEFAULTS, task="classify", lra_task="listops", lra_dir=lra_dir)
    with pytest.raises(data.DataError, match="line 3"):
        classify.load_split(cfg, "val")


def test_load_data_returns_the_manifest_summary(tmp_path):
    lra_dir = str(tmp_path)
    cfg = dict(train.DEFAULTS, task="classify", lra_task="listops", lra_dir=lra_dir, max_len=64,
               lra_options=dict(SIZES, seed=2, workers=1))
    classify.prepare_data(cfg)
    d = classify.load_data(cfg)
    assert d["manifest"] == {"task": "listops", "source": "generated", "train_size": 6, "train_size_unit": "examples",
                             "val_size": 2, "test_size": 2, "seed": 2, "generator": "data.lra.listops",
                             "generator_version": listops.GENERATOR_VERSION}
    assert d["train"]["tokens"].dtype == np.uint8
    json.dumps(d["manifest"])  # goes to log.jsonl and final_metrics.json
    bad = dict(cfg, lra_options={"val": "nope"}, lra_task="text")
    with pytest.raises(ConfigError, match="val mode 'nope'"):
        classify.load_split(bad, "val")


# ---------------------------------------------------------------- Image (CIFAR-10)


def batch_bytes(n, seed, name):
    rng = np.random.default_rng(seed)
    d = {b"batch_label": name.encode(), b"labels": [i % 10 for i in range(n)],
         b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)}
    return pickle.dumps(d, protocol=2)


def write_batches(folder, n=10, seed=0):
    folder.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(image.TRAIN_BATCHES + (image.TEST_BATCH,)):
        (folder / name).write_bytes(batch_bytes(n, seed + i, name))


def write_subset(file, n=20):
    rng = np.random.default_rng(5)
    file.parent.mkdir(parents=True, exist_ok=True)
    labels = np.arange(n) % 10
    np.savez(file, train_data_batch_1_first1000=rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8),
             test_batch_first1000=rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8),
             data_batch_1_labels=labels, test_batch_labels=labels)


def test_image_cache_follows_the_source_subset_then_full(tmp_path):
    lra_dir = str(tmp_path / "lra")
    write_subset(tmp_path / "subset" / image.SUBSET_FILE)
    m = image.ensure(lra_dir, cifar10_source=str(tmp_path / "subset"))
    assert m["source"] == image.SOURCE_KINDS["subset"] and m["sizes"] == {"train": 18, "val": 2, "test": 20}
    write_batches(tmp_path / "full" / "cifar-10-batches-py")
    m = image.ensure(lra_dir, cifar10_source=str(tmp_path / "full"))  # the full batches: converted again
    assert m["source"] == image.SOURCE_KINDS["batches"] and m["sizes"] == {"train": 45, "val": 5, "test": 10}
    assert len(image.load(lra_dir, "train")["labels"]) == 45
    stamp = mtimes(os.path.join(lra_dir, image.FOLDER))
    # the same files elsewhere (cifar10_source is run-only): reused; no source given: the cache as it is
    write_batches(tmp_path / "copy")
    assert image.ensure(lra_dir, cifar10_source=str(tmp_path / "copy"))["source_sha256"] == m["source_sha256"]
    assert image.ensure(lra_dir) == data.read_manifest(os.path.join(lra_dir, image.FOLDER))
    assert mtimes(os.path.join(lra_dir, image.FOLDER)) == stamp
    # a cache written before manifests: used when no source is given, converted again when one is
    os.remove(os.path.join(lra_dir, image.FOLDER, data.MANIFEST))
    assert image.ensure(lra_dir)["source"] == FOUND_IN_PLACE
    assert image.ensure(lra_dir, cifar10_source=str(tmp_path / "subset"))["sizes"]["train"] == 18


def make_tarball(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for i, name in enumerate(image.TRAIN_BATCHES + (image.TEST_BATCH, "batches.meta")):
            body = batch_bytes(10, i, name)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
        evil = tarfile.TarInfo("../outside.txt")  # never extracted
        evil.size = 1
        tar.addfile(evil, io.BytesIO(b"x"))
    path = tmp_path / "served" / "cifar-10-python.tar.gz"
    path.parent.mkdir()
    path.write_bytes(buf.getvalue())
    return path, hashlib.md5(buf.getvalue()).hexdigest()


def test_cifar_download_with_the_standard_library(tmp_path, monkeypatch):
    tarball, md5 = make_tarball(tmp_path)
    monkeypatch.setattr(image, "CIFAR10_URL", tarball.as_uri())
    monkeypatch.setattr(image, "CIFAR10_MD5", md5)
    lra_dir = tmp_path / "lra"
    m = image.ensure(str(lra_dir))  # no source given, no cache: downloaded
    assert m["source"] == image.SOURCE_KINDS["batches"] and m["sizes"] == {"train": 45, "val": 5, "test": 10}
    download = lra_dir / image.FOLDER / "download"
    assert sorted(os.listdir(download / "cifar-10-batches-py")) == sorted(image.TRAIN_BATCHES + (image.TEST_BATCH,))
    assert not (lra_dir / image.FOLDER / "outside.txt").exists() and not (tmp_path / "outside.txt").exists()
    assert [f for f in os.listdir(download) if ".part." in f] == []
    with open(download / "cifar-10-batches-py" / "data_batch_1", "rb") as f:
        first = pickle.load(f, encoding="bytes")[b"data"][0]
    assert np.array_equal(image.load(str(lra_dir), "train")["tokens"][0] - 1, image.to_gray(first[None])[0])
    # the real error of a failed download, and a wrong md5 with both values
    with pytest.raises(data.DataUnavailable, match=r"failed \(URLError: .*No such file") as e:
        image.download(str(tmp_path / "d1"), url=(tmp_path / "nothing.tar.gz").as_uri())
    assert "\n" not in str(e.value) and "CIFAR10_DIR" in str(e.value)
    with pytest.raises(data.DataUnavailable, match=f"md5 {md5}, expected the published 0{{32}}"):
        image.download(str(tmp_path / "d2"), md5="0" * 32)
    assert not os.path.exists(tmp_path / "d2" / "cifar-10-python.tar.gz")


# ---------------------------------------------------------------- Text (IMDB)


def write_imdb(root, files):
    for rel, body in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(body)


GOOD = {"train/pos/0_9.txt": b"great", "train/neg/0_1.txt": b"awful", "test/pos/0_10.txt": b"superb",
        "test/neg/0_2.txt": b"bad"}


def test_text_cache_follows_the_source(tmp_path):
    lra_dir = str(tmp_path / "lra")
    write_imdb(tmp_path / "a", GOOD)
    m = text.ensure(lra_dir, imdb_source=str(tmp_path / "a"))
    assert m["source"] == "aclImdb directory" and m["sizes"] == {"train": 2, "test": 2}
    write_imdb(tmp_path / "b", {**GOOD, "train/pos/1_8.txt": b"fine film"})
    m = text.ensure(lra_dir, imdb_source=str(tmp_path / "b"))  # other reviews: converted again
    assert m["sizes"] == {"train": 3, "test": 2} and len(text.load(lra_dir, "train", 8, val="test")["labels"]) == 3
    stamp = mtimes(os.path.join(lra_dir, text.FOLDER))
    write_imdb(tmp_path / "c", {**GOOD, "train/pos/1_8.txt": b"fine film"})  # the same reviews elsewhere
    assert text.ensure(lra_dir, imdb_source=str(tmp_path / "c"))["source_sha256"] == m["source_sha256"]
    assert text.ensure(lra_dir)["sizes"]["train"] == 3  # nothing given: the cache as it is
    assert mtimes(os.path.join(lra_dir, text.FOLDER)) == stamp


# ---------------------------------------------------------------- Retrieval


def test_retrieval_reads_bytes_into_compact_arrays(tmp_path):
    lra_dir = str(tmp_path)
    folder = tmp_path / retrieval.FOLDER
    folder.mkdir()
    latin1 = "Déjà vu".encode("latin-1")  # not UTF-8
    lines = [b"1.0\taan/A\taan/B\t" + latin1 + b"\t\xff\xfe raw bytes",
             b" 0.0 \taan/C\taan/D\t\"quoted\" text\tplain",  # LRA: float labels with spaces, no quoting
             b"1\taan/E\taan/F\tx\t" + b"y" * 50,
             b"",  # blank lines are skipped
             b"1e0\taan/G\taan/H\tlast\tone"]
    for name in retrieval.FILES.values():
        (folder / name).write_bytes(b"\r\n".join(lines) + b"\r\n")
    m = retrieval.ensure(lra_dir)
    assert m["source"] == FOUND_IN_PLACE and m["sizes"]["train"] == os.path.getsize(folder / retrieval.FILES["train"])
    d = retrieval.load(lra_dir, "test", 20)
    assert d["tokens"].dtype == d["tokens2"].dtype == np.uint16 and d["tokens"].shape == (4, 20)
    assert d["labels"].tolist() == [1, 0, 1, 1]
    assert bytes((d["tokens"][0, :d["lengths"][0]] - 1).astype(np.uint8).tolist()) == latin1
    assert bytes((d["tokens2"][0, :d["lengths2"][0]] - 1).astype(np.uint8).tolist()) == b"\xff\xfe raw bytes"
    assert d["tokens2"][0].max() == 256  # byte 0xff -> id 256: needs uint16
    assert bytes((d["tokens"][1, :d["lengths"][1]] - 1).astype(np.uint8).tolist()) == b'"quoted" text'
    assert d["lengths2"].tolist() == [12, 5, 20, 3] and (d["tokens2"][1, 5:] == 0).all()
    cfg = dict(train.DEFAULTS, task="classify", lra_task="retrieval", lra_dir=lra_dir, max_len=20)
    loaded = classify.load_data(cfg)
    assert loaded["manifest"]["source"] == FOUND_IN_PLACE and loaded["manifest"]["train_size"] == 4
    assert loaded["train"]["tokens2"].dtype == np.uint16
    # an empty field: LRA's reader stops there too; one line naming file, line and the rule
    (folder / retrieval.FILES["test"]).write_bytes(lines[0] + b"\n" + b"0.0\taan/C\taan/D\t\t" + b"z" * 5000 + b"\n")
    with pytest.raises(data.DataFormatError, match=r"new_aan_pairs\.test\.tsv, line 2: empty text1: every field") as e:
        retrieval.load(lra_dir, "test")
    assert "\n" not in str(e.value) and len(str(e.value)) < 300


# ---------------------------------------------------------------- no ../shared in product code


def test_sources_come_only_from_options_and_environment(tmp_path, monkeypatch):
    assert image.find_source() is None and text.find_source() is None
    monkeypatch.setenv("CIFAR10_DIR", str(tmp_path / "nothing"))
    with pytest.raises(FileNotFoundError, match="holds no CIFAR-10"):
        image.find_source()
    for module in (listops, pathfinder, retrieval, text, image):
        source = open(module.__file__).read()
        assert "../shared" not in source and '"shared"' not in source, module.__name__


def test_retrieval_memory_peak_is_the_returned_arrays(tmp_path):
    """The old loader built int64 (N, max_len) arrays (4x the uint16 ones) from per-line int64
    copies; the peak must now stay near the returned arrays (numpy reports to tracemalloc)."""
    import tracemalloc

    folder = tmp_path / retrieval.FOLDER
    folder.mkdir()
    rng = np.random.default_rng(0)
    lines = [b"%d\ta\tb\t%s\t%s" % (i % 2, bytes(rng.integers(32, 127, 3000, dtype=np.uint8)), b"q" * 2000)
             for i in range(300)]
    (folder / retrieval.FILES["train"]).write_bytes(b"\n".join(lines) + b"\n")
    tracemalloc.start()
    try:
        d = retrieval.load(str(tmp_path), "train", 4000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    returned = sum(a.nbytes for a in d.values())
    assert returned >= 2 * 300 * 4000 * 2 and d["lengths"].tolist()[:2] == [3000, 3000]
    assert peak < 1.25 * returned, (peak, returned)
