"""tessel.torch.buffer_store without a cluster: every buffer dtype round-trips
bitwise through the layout (names KEY@DTYPE[dims], whole float32 words),
including 0-d, empty and odd-sized buffers and NaN bit patterns; a restore
whose stored buffers do not fit the model (a shape or dtype changed, a buffer
missing or not the model's) raises ValueError naming each one and changes no
buffer; non-persistent buffers are left out, as state_dict leaves them.

Usage: buffer_store_test.py
"""
import collections

import numpy as np
import torch

from tessel.torch import buffer_store as bs

failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)


def raises(fn, *fragments):
    try:
        fn()
    except ValueError as e:
        return all(f in str(e) for f in fragments), str(e)
    return False, "no ValueError"


class Net(torch.nn.Module):
    def __init__(self, features=4):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(features)
        self.fc = torch.nn.Linear(features, 2)
        self.register_buffer("scratch", torch.zeros(3), persistent=False)


def store_holding(model, values, step=6):
    """A BufferStore whose write of `step` held `values` (key -> tensor)."""
    store = bs.BufferStore(model, every=3)
    names, _, flat = bs.encode(values)
    store.names = names
    store.kept[step] = flat
    return store


def main():
    # Every dtype, bitwise (a NaN payload and -0.0 too), odd sizes, 0-d and empty.
    nan = torch.tensor([0x7fa00001], dtype=torch.int32).view(torch.float32)
    values = collections.OrderedDict([
        ("a.f32", torch.cat([nan, torch.tensor([-0.0, 1.5])])),
        ("a.f64", torch.tensor([[1e300, -2.0]], dtype=torch.float64)),
        ("a.f16", torch.tensor([1.0, 2.0, 3.0], dtype=torch.float16)),
        ("a.bf16", torch.tensor([0.5], dtype=torch.bfloat16)),
        ("a.i64", torch.tensor(2**40 + 7, dtype=torch.int64)),
        ("a.i32", torch.tensor([-1, 5], dtype=torch.int32)),
        ("a.i16", torch.tensor([-3], dtype=torch.int16)),
        ("a.i8", torch.tensor([-4, 4, 9], dtype=torch.int8)),
        ("a.u8", torch.tensor([255], dtype=torch.uint8)),
        ("a.bool", torch.tensor([True, False, True, True, False])),
        ("a.empty", torch.zeros(0, 3)),
    ])
    names, shapes, flat = bs.encode(values)
    check(names[4] == "a.i64@int64[]" and names[1] == "a.f64@float64[1,2]"
          and names[10] == "a.empty@float32[0,3]",
          f"layout names carry dtype and shape: {names[1]}, {names[4]}, {names[10]}")
    check(shapes == [[3], [4], [2], [1], [2], [2], [1], [1], [1], [2], [1]] and
          flat.dtype == np.float32 and flat.size == sum(s[0] for s in shapes),
          f"each buffer is ceil(bytes / 4) float32 words, at least one: {shapes}")
    back = bs.decode(names, flat)
    check(list(back) == list(values) and all(
        back[k].dtype == v.dtype and back[k].shape == v.shape and
        back[k].reshape(-1).view(torch.uint8).tolist() == v.reshape(-1).view(torch.uint8).tolist()
        for k, v in values.items()), "decode(encode(b)) is b bitwise, for every dtype")
    check(raises(lambda: bs.parse_name("bn.running_mean"), "KEY@DTYPE")[0] and
          raises(lambda: bs.parse_name("x@complex64[2]"), "KEY@DTYPE")[0],
          "a name without @DTYPE[dims], or of another dtype, is refused")
    check(raises(lambda: bs.decode(names, flat[:-1]), "end before")[0] and
          raises(lambda: bs.decode(names, np.concatenate([flat, flat[:1]])), "bytes")[0],
          "stored words that do not match the names are refused")

    model = Net()
    check(list(bs.persistent_buffers(model)) ==
          ["bn.running_mean", "bn.running_var", "bn.num_batches_tracked"],
          "persistent_buffers: the state_dict's buffers (scratch is not persistent)")
    saved = collections.OrderedDict(
        (k, v.clone() + 1) for k, v in bs.persistent_buffers(model).items())
    store = store_holding(model, saved)
    store.restore(6)
    check(all(torch.equal(b, saved[k]) for k, b in bs.persistent_buffers(model).items()),
          "restore(6) puts the buffers of step 6 into the model")

    def unchanged_after(store_values, *fragments, what):
        m = Net()
        before = {k: v.clone() for k, v in m.state_dict().items()}
        ok, msg = raises(lambda: store_holding(m, store_values).restore(6), *fragments)
        same = all(torch.equal(before[k], v) for k, v in m.state_dict().items())
        check(ok and same, f"{what}: ValueError ({msg}), the model unchanged")

    wrong_shape = collections.OrderedDict(saved)
    wrong_shape["bn.running_var"] = torch.ones(5)
    unchanged_after(wrong_shape, "bn.running_var", "[5]", "[4]", "No buffer was changed",
                    what="a buffer whose shape changed")
    wrong_dtype = collections.OrderedDict(saved)
    wrong_dtype["bn.num_batches_tracked"] = torch.tensor(3, dtype=torch.int32)
    unchanged_after(wrong_dtype, "bn.num_batches_tracked", "torch.int32",
                    what="a buffer whose dtype changed")
    extra = collections.OrderedDict(saved)
    extra["other.running_mean"] = torch.zeros(4)
    unchanged_after(extra, "not buffers of the model: other.running_mean",
                    what="a stored buffer the model lacks")
    missing = collections.OrderedDict(saved)
    del missing["bn.running_mean"]
    unchanged_after(missing, "not in the checkpoint: bn.running_mean",
                    what="a model buffer the checkpoint lacks")

    later = store_holding(Net(), saved, step=9)
    later.kept[12] = later.kept[9]
    later.kept[6] = later.kept[9]
    later.restore(9)
    check(list(later.kept) == [9, 6], f"a restore forgets the writes after its step: "
                                      f"{list(later.kept)}")
    if failures:
        raise SystemExit(f"{len(failures)} check(s) failed")
    print("OK")


if __name__ == "__main__":
    main()
