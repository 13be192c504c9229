"""Standard-library safetensors reading and writing for the TEST checkpoint generators
(scripts/make_cross_encoders.py, scripts/make_qwen3_models.py): byte-stable output, no PyTorch."""

import json
import struct
import sys
from array import array


def read_safetensors(path):
    """name -> (shape, raw little-endian F32 bytes); refuses other dtypes."""
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        if name.endswith("position_ids"):
            continue  # a buffer, not a weight; transformers does not save it
        if info["dtype"] != "F32":
            sys.exit(f"{path}: tensor {name} is {info['dtype']}, F32 expected")
        start, end = info["data_offsets"]
        tensors[name] = (info["shape"], data[base + start : base + end])
    return tensors


def write_safetensors(path, tensors, dtype="F32"):
    """tensors: name -> (shape, little-endian bytes of `dtype`); names sorted as safetensors does.
    Written to a temporary name, then renamed."""
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        shape, blob = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    tmp.replace(path)


def f32(values):
    """Little-endian float32 bytes."""
    a = array("f", values)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def bf16(values):
    """Little-endian bfloat16 bytes, rounded to nearest even (as torch's .to(torch.bfloat16))."""
    words = array("I")
    words.frombytes(array("f", values).tobytes())  # the float bits, in native order
    out = array("H", ((w + 0x7FFF + ((w >> 16) & 1)) >> 16 & 0xFFFF for w in words))
    if sys.byteorder != "little":
        out.byteswap()
    return out.tobytes()


def uniform(rng, n, scale, pack=f32):
    return pack(scale * (2.0 * rng.random() - 1.0) for _ in range(n))


def normal(rng, n, std, pack=f32):
    return pack(rng.gauss(0.0, std) for _ in range(n))
