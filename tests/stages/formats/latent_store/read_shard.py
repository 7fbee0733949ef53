#!/usr/bin/python3
"""Reads one value of a latent store shard with h5py and prints what it found as JSON.

Usage: read_shard.py SHARD VALUE. bfloat16 values are raw 16-bit words; float32 is bf16 << 16.
"""
import json
import sys

import h5py
import numpy as np


def as_float32(words, dtype):
    if dtype == "bfloat16":
        return (words.astype(np.uint32) << 16).view(np.float32)
    if dtype == "float16":
        return words.view(np.float16).astype(np.float32)
    if dtype == "bool":
        return words.astype(bool)
    return words


def main():
    path, name = sys.argv[1], sys.argv[2]
    with h5py.File(path, "r") as shard:
        dataset = shard["values/" + name]
        dtype = dataset.attrs.get("dtype", str(dataset.dtype))
        data = dataset[()]
        out = {
            "artifact_id": shard.attrs["artifact_id"],
            "build_id": shard.attrs["build_id"],
            "key_codec": shard.attrs["key_codec"],
            "schema_version": int(shard.attrs["schema_version"]),
            "sample_ids": shard["sample_ids"][()].tolist(),
            "shape": list(data.shape),
            "dtype": dtype,
            "numpy_dtype": str(data.dtype),
        }
        rows = [data[i] for i in range(data.shape[0])]
        offsets_name = "values/" + name + ".__offsets"
        if offsets_name in shard:
            offsets = shard[offsets_name][()]
            out["offsets"] = offsets.tolist()
            rows = [data[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]
        last = as_float32(rows[-1].reshape(-1), dtype)
        out["last_row_first_values"] = [float(v) for v in last[:4]]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
