"""`vsbench.imaging.batched`'s plumbing pinned value for value (issue 56: `make mutate` found the
header rule, the byte packing, the collate, `stack` and the device probe reached by no fast test, or
only through whole decodes that did not notice a shifted offset or a lost flag).

Each test was seen failing with its mutant planted."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from vsbench.imaging import batched, jpeg
from vsbench.models.registry import IMAGENET_MEAN, IMAGENET_STD, Preprocessing

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def _jpeg(size: tuple[int, int] = (32, 24), mode: str = "RGB", color: object = (200, 30, 60)) -> bytes:
    out = io.BytesIO()
    Image.new(mode, size, color).save(out, format="JPEG", quality=95)
    return out.getvalue()


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(out, format="PNG")
    return out.getvalue()


def _header(fmt: str = "JPEG", mode: str = "RGB", **info: object) -> SimpleNamespace:
    return SimpleNamespace(format=fmt, mode=mode, info=info)


def test_only_plain_rgb_or_grey_jpegs_go_to_the_device() -> None:
    assert jpeg.FAST_MODES == ("RGB", "L")
    assert batched.device_decodable(_header())
    assert batched.device_decodable(_header(mode="L"))
    assert not batched.device_decodable(_header(fmt="PNG"))
    assert not batched.device_decodable(_header(fmt="MPO"))
    assert not batched.device_decodable(_header(mode="CMYK"))
    assert not batched.device_decodable(_header(mode="YCbCr"))
    assert not batched.device_decodable(_header(fmt="PNG", mode="L"))
    # Adobe's marker with transform 0 means RGB stored as is: not for the device. Other transforms are.
    assert not batched.device_decodable(_header(adobe=100, adobe_transform=0))
    assert batched.device_decodable(_header(adobe=100, adobe_transform=1))
    assert batched.device_decodable(_header(adobe=100))
    assert batched.device_decodable(_header(adobe_transform=0))  # no Adobe marker: the flag is not read


def test_a_file_is_read_once_and_its_flag_comes_from_its_header(tmp_path: Path) -> None:
    photo, grey, png = tmp_path / "a.jpg", tmp_path / "g.jpg", tmp_path / "b.png"
    photo.write_bytes(_jpeg())
    grey.write_bytes(_jpeg(mode="L", color=90))
    png.write_bytes(_png())
    for path, flag in ((photo, True), (grey, True), (png, False)):
        data, decodable = batched.read_encoded(path, check_complete=True)
        assert data.dtype == np.uint8 and data.tobytes() == path.read_bytes() and decodable is flag
    item = batched.Encoded.read([photo, png, grey])
    assert [a.tobytes() for a in item.data] == [photo.read_bytes(), png.read_bytes(), grey.read_bytes()]
    assert item.decodable == (True, False, True)
    assert batched.Encoded.read([]) == batched.Encoded((), ())


def test_the_completeness_check_runs_only_when_asked_and_names_the_file(tmp_path: Path) -> None:
    cut = tmp_path / "cut.jpg"
    out = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (96, 96, 3), dtype=np.uint8)).save(out, format="JPEG")
    whole = out.getvalue()
    cut.write_bytes(whole[: len(whole) * 2 // 3])  # the scan ends early, the header is whole
    data, decodable = batched.read_encoded(cut, check_complete=False)
    assert decodable and data.tobytes() == cut.read_bytes()
    with pytest.raises(jpeg.TruncatedJpeg):
        batched.read_encoded(cut, check_complete=True)
    with pytest.raises(jpeg.TruncatedJpeg):
        batched.Encoded.read([cut], check_complete=True)
    assert batched.Encoded.read([cut]).decodable == (True,)  # Encoded.read checks only when asked
    junk = tmp_path / "junk.jpg"
    junk.write_bytes(b"not an image")
    with pytest.raises(Exception) as caught:
        batched.read_encoded(junk, check_complete=False)
    assert "junk.jpg" in str(caught.value)


def _item(*sizes: int, decodable: tuple[bool, ...] | None = None) -> batched.Encoded:
    data = tuple(np.arange(n, dtype=np.uint8) + 10 * k for k, n in enumerate(sizes))
    return batched.Encoded(data, decodable if decodable is not None else tuple(k % 2 == 0 for k in range(len(sizes))))


def test_a_batch_is_one_buffer_with_each_files_offsets_and_flags_in_order() -> None:
    first, second = _item(3, 2), _item(1, 4, decodable=(False, True))
    batch = batched.EncodedBatch.pack([first, second])
    assert batch.data.dtype == torch.uint8
    assert batch.data.tolist() == [0, 1, 2, 10, 11, 0, 10, 11, 12, 13]
    assert batch.offsets.tolist() == [0, 3, 5, 6, 10] and batch.offsets.dtype == torch.int64
    assert batch.decodable.tolist() == [True, False, False, True] and batch.decodable.dtype == torch.bool
    assert batch.per_item == 2 and batch.count == 4 and len(batch) == 2 and batch.shape == (2, 2)
    files = batch.files()
    assert [f.tolist() for f in files] == [[0, 1, 2], [10, 11], [0], [10, 11, 12, 13]]
    assert all(f.data_ptr() == batch.data.data_ptr() + start for f, start in zip(files, [0, 3, 5, 6]))
    single = batched.EncodedBatch.pack([_item(2, 1, 1)])
    assert len(single) == 1 and single.shape == (1, 3) and single.count == 3
    empty = batched.EncodedBatch.pack([batched.Encoded((np.zeros(0, np.uint8),), (True,))])
    assert empty.data.tolist() == [] and empty.offsets.tolist() == [0, 0] and [f.numel() for f in empty.files()] == [0]


def test_a_batch_of_items_with_other_image_counts_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError) as caught:
        batched.EncodedBatch.pack([_item(1, 1), _item(1), _item(1, 1, 1)])
    assert str(caught.value) == "items of one batch hold [1, 2, 3] images each: need one count"
    with pytest.raises(ValueError) as caught:
        batched.EncodedBatch.pack([])
    assert str(caught.value) == "items of one batch hold [] images each: need one count"


def test_pinning_a_batch_pins_its_bytes_and_keeps_the_rest() -> None:
    batch = batched.EncodedBatch.pack([_item(2), _item(3)])
    calls: list[tuple[object, ...]] = []

    class Pinnable:
        def pin_memory(self, *args: object) -> str:
            calls.append(args)
            return "pinned"

    batch.data = Pinnable()  # type: ignore[assignment]
    pinned = batch.pin_memory("cuda:1")
    assert isinstance(pinned, batched.EncodedBatch) and pinned.data == "pinned" and calls == [("cuda:1",)]
    assert pinned.offsets is batch.offsets and pinned.decodable is batch.decodable and pinned.per_item == 1


def test_collate_packs_the_encoded_leaves_and_collates_the_rest() -> None:
    items = [(_item(2), 3, "a"), (_item(1, decodable=(False,)), 5, "b")]
    packed, labels, names = batched.collate_encoded(items)
    assert isinstance(packed, batched.EncodedBatch) and packed.offsets.tolist() == [0, 2, 3]
    assert packed.decodable.tolist() == [True, False] and packed.data.tolist() == [0, 1, 0]
    assert labels.tolist() == [3, 5] and list(names) == ["a", "b"]
    assert batched.collate_encoded([1, 2]).tolist() == [1, 2]


def _decoder(fallback=None) -> batched.BatchDecoder:
    preprocessing = Preprocessing(16, 16, IMAGENET_MEAN, IMAGENET_STD)
    return batched.BatchDecoder(CPU, preprocessing, fallback or (lambda data: np.zeros((16, 16, 3), np.uint8)))


def _batch(*files: bytes) -> batched.EncodedBatch:
    return batched.EncodedBatch.pack([batched.Encoded((np.frombuffer(f, np.uint8),), (True,)) for f in files])


def test_stack_gives_one_tensor_of_the_inputs_size_or_refuses_naming_a_reason() -> None:
    decoder = _decoder()
    stacked = decoder.stack(_batch(_jpeg((16, 16)), _jpeg((16, 16), color=(0, 0, 255))))
    assert stacked.shape == (2, 3, 16, 16) and stacked.dtype == torch.uint8
    assert decoder.stats() == {"device_decoded": 2, "cpu_fallbacks": 0}
    assert abs(int(stacked[1, 2].float().mean()) - 254) <= 2 and int(stacked[1, 0].float().mean()) <= 2

    def refuse(data: bytes) -> np.ndarray:
        raise OSError(f"cannot identify image file of {len(data)} bytes")

    failing = _decoder(refuse)
    with pytest.raises(ValueError) as caught:
        failing.stack(_batch(_jpeg((16, 16)), b"\xff\xd8junk", b"\xff\xd8junk too"))
    assert str(caught.value) == "2 image(s) of a batch could not be decoded, e.g. OSError: cannot identify image file of 6 bytes"
    assert failing.stats() == {"device_decoded": 1, "cpu_fallbacks": 2}
    with pytest.raises(ValueError) as caught:
        _decoder(refuse).stack(_batch(b"\xff\xd8bad", _jpeg((16, 16))))
    assert str(caught.value) == "1 image(s) of a batch could not be decoded, e.g. OSError: cannot identify image file of 5 bytes"


def test_the_device_probe_asks_for_the_cuda_op_on_cuda_and_the_cpu_op_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    import torchvision.io  # noqa: F401 - registers torch.ops.image before it is replaced

    cpu_only = SimpleNamespace(image=SimpleNamespace(decode_jpeg=object()))
    both = SimpleNamespace(image=SimpleNamespace(decode_jpeg=object(), decode_jpegs_cuda=object()))
    cuda_only = SimpleNamespace(image=SimpleNamespace(decode_jpegs_cuda=object()))
    for ops, on_cpu, on_cuda in ((cpu_only, True, False), (both, True, True), (cuda_only, False, True)):
        monkeypatch.setattr(torch, "ops", ops)
        assert batched.device_decode_available(CPU) is on_cpu
        assert batched.device_decode_available(CUDA) is on_cuda

    class Broken:
        def __getattr__(self, name: str) -> object:
            raise RuntimeError("no image ops in this build")

    monkeypatch.setattr(torch, "ops", Broken())
    assert batched.device_decode_available(CPU) is False and batched.device_decode_available(CUDA) is False
    monkeypatch.setattr(torch, "ops", SimpleNamespace())
    assert batched.device_decode_available(CPU) is False


def test_the_choice_passes_the_device_kind_the_workload_and_the_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[object, ...]] = []

    def resolve(mode: str, kind: str, workload: str, *, device_decode_available: bool) -> SimpleNamespace:
        seen.append((mode, kind, workload, device_decode_available))
        return SimpleNamespace(on_device=mode == "gpu")

    monkeypatch.setattr(batched, "resolve_decode", resolve)
    monkeypatch.setattr(batched, "device_decode_available", lambda device: device.type == "cpu")
    assert batched.decode_choice("auto", CUDA, "train").on_device is False
    assert batched.uses_device_decode("gpu", CPU, "embed") is True
    assert batched.uses_device_decode("cpu", CPU, "train") is False
    assert seen == [("auto", "cuda", "train", False), ("gpu", "cpu", "embed", True), ("cpu", "cpu", "train", True)]


# --- the geometry, against torchvision's own transforms (the Pillow path shares these two functions
# with the tensor path, so comparing the two paths cannot see a wrong box: issue 56's mutants did) ---


def _torchvision_size(width: int, height: int, size: int) -> tuple[int, int]:
    from torchvision.transforms.v2 import functional as TF

    resized = TF.resize(torch.zeros(1, height, width), [size], antialias=True)
    return resized.shape[-1], resized.shape[-2]


@pytest.mark.parametrize("width,height", [(300, 200), (200, 300), (257, 256), (256, 257), (640, 480), (223, 1000)])
def test_the_shorter_side_resize_gives_torchvisions_size(width: int, height: int) -> None:
    shorter = Preprocessing(224, 256, IMAGENET_MEAN, IMAGENET_STD)
    assert batched.resized_size(width, height, shorter) == _torchvision_size(width, height, 256)
    square = Preprocessing(224, 240, IMAGENET_MEAN, IMAGENET_STD, resize_mode="square")
    assert batched.resized_size(width, height, square) == (240, 240)


def _coordinates(width: int, height: int) -> torch.Tensor:
    """A (2, H, W) image whose pixels are their own (x + 1, y + 1): a crop's first pixel names its corner."""
    ys, xs = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    return torch.stack([xs + 1, ys + 1]).to(torch.int64)


@pytest.mark.parametrize("target", [(256, 256), (256, 341), (341, 256), (257, 300), (300, 257), (259, 262)])
def test_the_center_crop_is_torchvisions_rounding_half_to_even_and_hugging_faces_floor(target) -> None:
    from torchvision.transforms.v2 import functional as TF

    rounded = Preprocessing(224, 256, IMAGENET_MEAN, IMAGENET_STD)
    cropped = TF.center_crop(_coordinates(*target), [224, 224])
    left, top, right, bottom = batched.crop_box(target, rounded)
    assert (right - left, bottom - top) == (224, 224)
    assert (left + 1, top + 1) == (int(cropped[0, 0, 0]), int(cropped[1, 0, 0]))
    floored = Preprocessing(224, 256, IMAGENET_MEAN, IMAGENET_STD, crop_offset="floor")
    assert batched.crop_box(target, floored) == ((target[0] - 224) // 2, (target[1] - 224) // 2,
                                                 (target[0] - 224) // 2 + 224, (target[1] - 224) // 2 + 224)


def test_hugging_faces_floor_and_torchvisions_rounding_differ_where_the_margin_is_odd() -> None:
    rounded = Preprocessing(224, 256, IMAGENET_MEAN, IMAGENET_STD)
    floored = Preprocessing(224, 256, IMAGENET_MEAN, IMAGENET_STD, crop_offset="floor")
    # margins 35 and 37: halves 17.5 and 18.5, which round half to even gives as 18 and 18; floor as 17 and 18
    assert batched.crop_box((259, 261), rounded) == (18, 18, 242, 242)
    assert batched.crop_box((259, 261), floored) == (17, 18, 241, 242)
    whole = Preprocessing(48, 48, IMAGENET_MEAN, IMAGENET_STD, preserve_aspect_ratio=True)
    assert batched.crop_box((48, 70), whole) == (0, 0, 48, 70)


def test_a_draft_scale_without_a_resize_after_it_still_gives_uint8_block_means() -> None:
    # 32 x 32 to a 16 x 16 square: Pillow's draft decodes at 1/2, so a 2 x 2 block mean, and nothing else
    preprocessing = Preprocessing(16, 16, IMAGENET_MEAN, IMAGENET_STD)
    images = torch.zeros(1, 3, 32, 32, dtype=torch.uint8)
    images[..., 0::2, :] = 10
    images[..., 1::2, :] = 13  # each 2 x 2 block: mean 11.5, rounded half to even: 12
    out = batched.resize_and_crop(images, preprocessing)
    assert out.dtype == torch.uint8 and out.shape == (1, 3, 16, 16) and bool((out == 12).all())


def test_bicubic_overshoot_is_clamped_to_0_and_255_not_wrapped() -> None:
    # a black-to-white step upscaled with bicubic rings below 0 and above 255 beside the step
    preprocessing = Preprocessing(40, 40, IMAGENET_MEAN, IMAGENET_STD, "bicubic")
    images = torch.zeros(1, 3, 10, 10, dtype=torch.uint8)
    images[..., 5:] = 255
    out = batched.resize_and_crop(images, preprocessing)
    raw = torch.nn.functional.interpolate(images.float(), size=(40, 40), mode="bicubic", antialias=True,
                                          align_corners=False)
    assert float(raw.min()) < -1 and float(raw.max()) > 256  # the ringing this test is about
    row = out[0, 0, 20].to(torch.int64)
    assert out.dtype == torch.uint8 and int(out.min()) == 0 and int(out.max()) == 255
    assert bool((row[1:] >= row[:-1]).all()), row.tolist()  # one rise, no wrapped values


def test_the_device_decode_waits_for_the_stream_decodes_in_one_call_then_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    import warnings

    import torchvision.io

    calls: list[tuple[object, dict]] = []

    def decode_jpeg(data, **options):
        calls.append((data, options))
        warnings.warn("The decoding and encoding capabilities of TorchVision are deprecated", UserWarning, stacklevel=2)
        if isinstance(data, list):
            raise RuntimeError("one of the files is not decodable")
        if bytes(data.numpy()).startswith(b"bad"):
            raise RuntimeError("not a JPEG")
        warnings.warn("another warning", RuntimeWarning, stacklevel=2)
        return torch.full((3, 1, 1), len(data))

    synced: list[object] = []
    monkeypatch.setattr(torchvision.io, "decode_jpeg", decode_jpeg)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: SimpleNamespace(synchronize=lambda: synced.append(device)))
    files = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in (b"good1", b"bad", b"good22")]
    with pytest.warns(RuntimeWarning, match="another warning"):
        out = batched.decode_files(files, CUDA)
    assert [None if o is None else int(o.flatten()[0]) for o in out] == [5, None, 6]
    assert synced == [CUDA]
    assert [(type(data).__name__, options) for data, options in calls] == [
        ("list", {"mode": torchvision.io.ImageReadMode.RGB, "device": CUDA})] + [
        ("Tensor", {"mode": torchvision.io.ImageReadMode.RGB, "device": CUDA})] * 3
    assert calls[1][0] is files[0] and calls[3][0] is files[2]
    synced.clear()
    with pytest.warns(RuntimeWarning, match="another warning"):
        assert len(batched.decode_files(files[:1], CPU)) == 1 and synced == []  # no stream to wait for on the CPU
    assert batched.decode_files([], CUDA) == [] and synced == []


def test_only_three_channel_device_images_are_kept_the_rest_go_to_the_fallback_counted(monkeypatch) -> None:
    preprocessing = Preprocessing(4, 4, IMAGENET_MEAN, IMAGENET_STD)
    device_out = {b"rgb": torch.full((3, 4, 4), 7, dtype=torch.uint8), b"big": torch.full((3, 8, 8), 9, dtype=torch.uint8),
                  b"grey": torch.full((1, 4, 4), 5, dtype=torch.uint8), b"four": torch.full((4, 4, 4), 5, dtype=torch.uint8),
                  b"flat": torch.full((3, 12), 5, dtype=torch.uint8), b"refused": None,
                  b"wide": torch.full((3, 4, 8), 6, dtype=torch.uint8)}
    sent: list[bytes] = []

    def decode_files(files, device):
        sent.extend(bytes(f.numpy()) for f in files)
        return [device_out[bytes(f.numpy())] for f in files]

    def fallback(data: bytes) -> np.ndarray:
        if data == b"broken":
            raise OSError(f"cannot read {data!r}")
        return np.full((4, 4, 3), len(data), dtype=np.uint8)

    monkeypatch.setattr(batched, "decode_files", decode_files)
    names = [b"rgb", b"png", b"grey", b"four", b"big", b"flat", b"refused", b"wide", b"broken"]
    flags = (True, False, True, True, True, True, True, True, False)
    batch = batched.EncodedBatch.pack([batched.Encoded((np.frombuffer(n, np.uint8),), (ok,)) for n, ok in zip(names, flags)])
    decoder = batched.BatchDecoder(CPU, preprocessing, fallback)
    images, reasons = decoder.decode(batch)
    assert sent == [b"rgb", b"grey", b"four", b"big", b"flat", b"refused", b"wide"]  # what the header rule allows
    assert reasons == ["", "", "", "", "", "", "", "", "OSError: cannot read b'broken'"]
    assert images[-1] is None
    # device images resized (the 8 x 8 one to 4 x 4: block means of 9), the others the fallback's pixels (their byte count)
    assert [int(i[0, 0, 0]) for i in images[:-1]] == [7, 3, 4, 4, 9, 4, 7, 6]
    assert all(i.shape == (3, 4, 4) and i.dtype == torch.uint8 for i in images[:-1])
    assert decoder.stats() == {"device_decoded": 3, "cpu_fallbacks": 6}
    decoder.decode(batch)
    assert decoder.stats() == {"device_decoded": 6, "cpu_fallbacks": 12}


@pytest.mark.parametrize("side", [20, 21])
def test_a_crop_past_the_image_is_padded_with_zeros_as_pillows_crop_pads(side: int) -> None:
    """No preprocessing vsbench builds crops past its resize (``Preprocessing`` refuses a resize
    smaller than the crop); should one ever, the tensor path pads as the Pillow path's ``crop`` does,
    not a smaller input. Forced here on a valid preprocessing whose crop is then widened."""
    import dataclasses

    preprocessing = Preprocessing(side, side, IMAGENET_MEAN, IMAGENET_STD, resize_mode="square")
    object.__setattr__(preprocessing, "input_size", 24)  # past the checks: the crop 24, the image side
    assert preprocessing.crops and dataclasses.is_dataclass(preprocessing)
    rng = np.random.default_rng(side)
    pixels = rng.integers(1, 256, (side, side, 3), dtype=np.uint8)
    out = batched.resize_and_crop(torch.from_numpy(pixels).permute(2, 0, 1)[None], preprocessing)
    box = batched.crop_box((side, side), preprocessing)
    expected = np.asarray(Image.fromarray(pixels).crop(box))
    assert out.shape == (1, 3, 24, 24) and np.array_equal(out[0].permute(1, 2, 0).numpy(), expected)


@pytest.mark.parametrize("size", [(20, 30), (30, 20)])
def test_a_crop_past_one_side_of_an_oblong_image_is_padded_on_that_side_only(size: tuple[int, int]) -> None:
    preprocessing = Preprocessing(20, 20, IMAGENET_MEAN, IMAGENET_STD, resize_mode="shorter")
    object.__setattr__(preprocessing, "input_size", 24)  # wider than the short side, narrower than the long one
    rng = np.random.default_rng(sum(size))
    pixels = rng.integers(1, 256, (size[1], size[0], 3), dtype=np.uint8)
    out = batched.resize_and_crop(torch.from_numpy(pixels).permute(2, 0, 1)[None], preprocessing)
    expected = np.asarray(Image.fromarray(pixels).crop(batched.crop_box(size, preprocessing)))
    assert out.shape == (1, 3, 24, 24) and np.array_equal(out[0].permute(1, 2, 0).numpy(), expected)


def test_items_of_no_images_pack_into_an_empty_uint8_batch() -> None:
    batch = batched.EncodedBatch.pack([batched.Encoded((), ()), batched.Encoded((), ())])
    assert batch.data.dtype == torch.uint8 and batch.data.numel() == 0
    assert batch.decodable.dtype == torch.bool and batch.decodable.numel() == 0
    assert batch.offsets.tolist() == [0] and batch.count == 0 and batch.per_item == 0 and batch.files() == []


def test_the_resize_runs_in_float32_under_the_callers_autocast() -> None:
    preprocessing = Preprocessing(24, 24, IMAGENET_MEAN, IMAGENET_STD, "bicubic")
    rng = np.random.default_rng(3)
    photo = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (37, 53, 3), dtype=np.uint8)).save(photo, format="JPEG", quality=95)
    batch = batched.EncodedBatch.pack([batched.Encoded((np.frombuffer(photo.getvalue(), np.uint8),), (True,))])
    plain, _ = batched.BatchDecoder(CPU, preprocessing, lambda data: None).decode(batch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under, _ = batched.BatchDecoder(CPU, preprocessing, lambda data: None).decode(batch)
    assert torch.equal(plain[0], under[0])
