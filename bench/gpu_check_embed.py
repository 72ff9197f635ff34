"""bench/gpu_check.sh's Python half: the embed and decode measurements, and the one table at the end.

``--photos DIR --out DIR --results DIR``: embed every photo with the batched device decode and with
Pillow in the workers (images/s as each manifest states it, per-image cosine between the two, and
each manifest's per-stage timeline of one steady batch: read, copy, decode, network, write, from
CUDA events on a GPU, perf_counter on the CPU), time the network alone on tensors already on the
device (same batch, same precision, same compile mode: the limit either path can reach, issue 58),
then time decoding alone: Pillow's decode + resize + crop on one core against the batched
decode + resize + crop on the device. ``--table --work DIR --results DIR``: print everything the
script measured as one table, each end-to-end rate beside the model-only one and their ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path

import numpy as np
import torch

from vsbench.imaging import batched
from vsbench.io.features import ImageSet
from vsbench.models.registry import build_model
from vsbench.retrieval import embed
from vsbench.runtime.compile import network_for
from vsbench.runtime.device import setup_device
from vsbench.runtime.feeder import normalizer

PILLOW_SAMPLE = 2000  # images Pillow decodes for its rate (one core)
DEVICE_SAMPLE = 20000  # images the device decodes for its rate
MODEL_ONLY_BATCHES = {"cuda": 40, "cpu": 2}  # timed batches of the network alone (after two warm-up batches)


def measure(args: argparse.Namespace) -> None:
    photos = sorted(Path(args.photos).glob("*.jpg"))[:args.limit or None]
    images = ImageSet(tuple(p.stem for p in photos), tuple(photos))
    found: dict = {"photos": len(photos)}
    features = {}
    for decode in ("gpu", "cpu"):
        path = embed.embed_image_set(args.model, images, Path(args.out) / decode, set_name="photos",
                                     batch_size=args.batch_size, device=args.device, workers=args.workers,
                                     model_options={"weights": "random"}, progress=False, decode=decode)
        manifest = json.loads(path.with_suffix(".json").read_text())
        found[f"embed_{decode}"] = {k: manifest.get(k) for k in ("count", "seconds", "model_build_seconds",
                                                                  "images_per_second", "images_per_second_steady",
                                                                  "decode", "device", "stages", "amp_dtype")}
        loaded = embed.load_features(path)
        features[decode] = dict(zip(loaded.ids.tolist(), loaded.features))
    common = sorted(set(features["gpu"]) & set(features["cpu"]))
    x = np.stack([features["gpu"][i] for i in common])
    y = np.stack([features["cpu"][i] for i in common])
    cosine = (x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)
    found["cosine"] = {"images": len(common), "worst": float(cosine.min()), "mean": float(cosine.mean())}
    found["model_only"] = model_only(args)
    found["decode_rates"] = decode_rates(photos, args)
    (Path(args.results) / "embed.json").write_text(json.dumps(found, indent=1))


def model_only(args: argparse.Namespace) -> dict:
    """The network alone: normalized float batches already on the device, channels_last, the embed
    step's precision (autocast where it uses it) and compile mode (auto): what end to end tends to."""
    setup = setup_device(args.device)
    model = build_model(args.model, weights="random").to(setup.device, memory_format=torch.channels_last).eval()
    network = network_for(model, "auto", setup.device)
    scale, shift = normalizer(model.preprocessing, setup.device)
    size = model.preprocessing.input_size
    pixels = torch.randint(0, 256, (args.batch_size, size, size, 3), dtype=torch.uint8, device=setup.device)
    x = pixels.permute(0, 3, 1, 2).float().mul_(scale).add_(shift)
    batches = MODEL_ONLY_BATCHES["cuda" if setup.is_cuda else "cpu"]
    use_amp = model.supports_autocast and setup.amp_dtype is not None
    with torch.inference_mode(), setup.autocast() if use_amp else contextlib.nullcontext():
        for _round, count in (("warm-up", 2), ("timed", batches)):
            if setup.is_cuda:
                torch.cuda.synchronize()
            started = time.perf_counter()
            for _ in range(count):
                network(x).float()
            if setup.is_cuda:
                torch.cuda.synchronize()
            seconds = time.perf_counter() - started
    return {"images": batches * args.batch_size, "seconds": seconds, "images_per_second": batches * args.batch_size / seconds,
            "batch_size": args.batch_size, "amp_dtype": str(setup.amp_dtype).removeprefix("torch.") if use_amp else None}


def decode_rates(photos: list[Path], args: argparse.Namespace) -> dict:
    """Pillow on one core vs the batched decode on the device, same photos, same preprocessing."""
    preprocessing = build_model(args.model, weights="random").preprocessing
    sample = photos[:PILLOW_SAMPLE]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    started = time.perf_counter()
    for path in sample:
        embed.load_image(path, preprocessing)
    pillow = len(sample) / (time.perf_counter() - started)
    torch.set_num_threads(threads)
    setup = setup_device(args.device)
    decoder = embed.device_decoder(setup, preprocessing, "gpu")
    sample = photos[:DEVICE_SAMPLE]
    encoded = [batched.Encoded.read([p]) for p in sample]  # bytes in memory: the decode alone is timed
    for round_ in ("warm-up", "timed"):
        started = time.perf_counter()
        for start in range(0, len(encoded) if round_ == "timed" else min(len(encoded), args.batch_size),
                            args.batch_size):
            decoder.decode(batched.EncodedBatch.pack(encoded[start:start + args.batch_size]))
        if setup.is_cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
    return {"pillow_one_core": pillow, "pillow_images": min(len(photos), PILLOW_SAMPLE),
            "device": len(encoded) / seconds, "device_images": len(encoded), **decoder.stats()}


def embed_choice(device: str) -> batched.DecodeChoice:
    """What ``--decode auto`` takes for embedding on ``device`` (imaging/modes.py's table)."""
    return batched.decode_choice("auto", setup_device(device).device, "embed")


def _fmt(value: float | int | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


def _row(rows: list, what: str, where: str, images, seconds, rate, note: str = "") -> None:
    fmt = _fmt
    rows.append((what, where, fmt(images, ","), fmt(seconds, ".1f"), fmt(rate, ",.0f"), note))


def table(args: argparse.Namespace) -> None:
    work, results = Path(args.work), Path(args.results)
    found = json.loads((results / "embed.json").read_text())
    rows: list = []

    def seconds(name: str) -> float | None:
        path = results / f"{name}.seconds"
        return float(path.read_text()) if path.exists() else None

    synth = seconds("synth")
    _row(rows, "synth abid (photos)", "cpu", found["photos"], synth, found["photos"] / synth if synth else None,
         "" if synth else "kept from an earlier run")
    resized = seconds("resize")
    _row(rows, "abid resize to 224", "cpu", found["photos"], resized, found["photos"] / resized if resized else None)
    limit = found["model_only"]
    _row(rows, "model only (tensors on the device)", args.device, limit["images"], limit["seconds"],
         limit["images_per_second"], f"batch {limit['batch_size']}, {limit['amp_dtype'] or 'float32'}: the limit")
    for decode, label in (("gpu", "decoded on the device"), ("cpu", "decoded by Pillow in the workers")):
        e = found[f"embed_{decode}"]
        info = e.get("decode") or {}
        note = label + (f", {info.get('cpu_fallbacks', 0)} CPU fallbacks" if info.get("on_device") else "")
        steady = e.get("images_per_second_steady") or e["images_per_second"]
        ratio = f"; steady {steady:,.0f}/s = {steady / limit['images_per_second']:.2f} of model only"
        _row(rows, f"embed {e['count']:,} photos, end to end", str(e.get("device")), e["count"], e["seconds"],
             e["images_per_second"], note + ratio + f"; model built in {e['model_build_seconds']:.1f} s")
        stages = e.get("stages") or {}
        if stages.get("timeline_ms"):
            spans = ", ".join(f"{name} {ms:.1f}" for name, ms in stages["timeline_ms"].items())
            rows.append((f"  batch {stages['steady_batch'] + 1} of {stages['batches']}, ms per stage", "", "", "", "",
                         f"{spans} ({stages['clock']})"))
    auto = embed_choice(args.device)
    rows.append(("--decode auto embeds with", args.device, "", "", "", f"{auto.path}: {auto.reason[:90]}"))
    c = found["cosine"]
    rows.append(("descriptors: device vs Pillow decode", "", f"{c['images']:,}", "", "",
                 f"cosine worst {c['worst']:.6f}, mean {c['mean']:.6f}"))
    d = found["decode_rates"]
    _row(rows, "decode+resize+crop, Pillow", "cpu (1 core)", d["pillow_images"], None, d["pillow_one_core"],
         f"x {args.workers} workers at best: {d['pillow_one_core'] * int(args.workers or 1):,.0f}/s")
    _row(rows, "decode+resize+crop, batched", args.device, d["device_images"], None, d["device"],
         f"{d['cpu_fallbacks']} CPU fallbacks")
    for task in ("counting", "siamese"):
        summary = json.loads((work / "runs" / task / f"{task}_summary.json").read_text())
        history = summary["history"]
        first, last = history[0], history[-1]
        decode = summary.get("decode") or {}
        _row(rows, f"abid train {task}, epoch 1", args.device, None, first["epoch_seconds"],
             first["train_images_per_second"], "start-up included")
        where = (f"decoded on the device, {decode.get('cpu_fallbacks', 0)} CPU fallbacks" if decode.get("on_device")
                 else "decoded by Pillow")
        if len(history) > 1:
            _row(rows, f"abid train {task}, epoch {len(history)}", args.device, None, last["epoch_seconds"],
                 last["train_images_per_second"], f"steady state; {where}")
        else:
            rows[-1] = (*rows[-1][:5], f"start-up included; {where}")
    wheres = [args.device] if args.device == "cpu" else [args.device, "cpu"]
    tables = {}
    for where in wheres:
        records = json.loads((work / f"similarity-{where}" / "metrics.json").read_text())["records"]
        tables[where] = {(r["codec"], r.get("score_norm")): r for r in records}
    for key in tables[wheres[0]]:
        for metric in ("uap", "accuracy_at_1", "recall_at_p90"):
            values = "  ".join(f"{w} {tables[w][key][metric]:.4f}" for w in wheres if key in tables[w])
            rows.append((f"similarity disc {metric}", f"{key[0]}, norm {key[1]}", "", "", "", values))
    widths = [max(len(str(r[i])) for r in rows + [HEADER]) for i in range(len(HEADER))]
    print(f"\nvsbench GPU check: {found['photos']:,} generated photos, device {args.device}, "
          f"{args.seconds} s in all\n")
    for n, r in enumerate([HEADER] + rows):
        print(" | ".join(str(v).ljust(w) if i in (0, 1, 5) else str(v).rjust(w) for i, (v, w) in
                         enumerate(zip(r, widths))))
        if n == 0:
            print("-+-".join("-" * w for w in widths))


HEADER = ("what", "where", "images", "seconds", "images/s", "note")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--photos")
    parser.add_argument("--out")
    parser.add_argument("--results", required=True)
    parser.add_argument("--work")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--limit", type=int, default=0, help="embed and decode only this many photos (0: all)")
    parser.add_argument("--table", action="store_true")
    parser.add_argument("--seconds", default="?")
    args = parser.parse_args()
    table(args) if args.table else measure(args)


if __name__ == "__main__":
    main()
