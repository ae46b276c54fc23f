"""tessel.torch.load_pretrained without a cluster: each format (safetensors
written by a reference writer, torch.save, np.savez) loads bitwise into a
fresh model; [1] loads into a 0-d parameter; missing, unexpected and
mis-shaped keys are all named, sorted, and leave the model unchanged;
strict=False; unknown and malformed files."""
import collections
import os
import tempfile
import unittest
import zipfile

import numpy as np
import torch

import safetensors_ref
from tessel.torch import load_pretrained
from tessel.torch.pretrained import read_tensors


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 4)
        self.scale = torch.nn.Parameter(torch.tensor(0.5))
        self.bn = torch.nn.BatchNorm1d(4)

    def forward(self, x):
        return self.bn(self.fc(x)) * self.scale


def fresh(seed):
    torch.manual_seed(seed)
    return Net()


def params_of(model):
    """The parameters only, as float32 numpy arrays: what a Tessel export holds."""
    return collections.OrderedDict((n, p.detach().numpy().copy())
                                   for n, p in model.named_parameters())


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def snapshot(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


class PretrainedTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="pretrained-")
        self.src = fresh(1)
        with torch.no_grad():
            self.src.bn.running_mean.add_(3)
            self.src.bn.num_batches_tracked.add_(7)

    def path(self, name):
        return os.path.join(self.dir, name)

    def write_all(self, arrays):
        """The same name -> array mapping in each format; returns the paths."""
        st, pt, npz = self.path("m.safetensors"), self.path("m.pt"), self.path("m.npz")
        safetensors_ref.write(st, {k: v for k, v in arrays.items()
                                   if v.dtype == np.float32}, {"format": "pt"})
        torch.save(collections.OrderedDict((k, torch.from_numpy(np.array(v)))
                                           for k, v in arrays.items()), pt)
        np.savez(npz, **arrays)
        return st, pt, npz

    def test_every_format_loads_bitwise_and_is_detected(self):
        arrays = params_of(self.src)
        for path, fmt in zip(self.write_all(arrays), ("safetensors", "torch", "npz")):
            model = fresh(2)
            before = snapshot(model)
            got = load_pretrained(model, path, strict=False)
            self.assertEqual(got.format, fmt)
            self.assertEqual(got.keys, list(arrays))
            self.assertEqual(got.missing, ["bn.num_batches_tracked", "bn.running_mean",
                                           "bn.running_var"])
            self.assertEqual(got.unexpected, [])
            for name, p in model.named_parameters():
                self.assertTrue(same(p.detach(), dict(self.src.named_parameters())[name].detach()),
                                f"{fmt}: {name}")
            self.assertTrue(same(model.bn.running_mean, before["bn.running_mean"]),
                            "a key not in the file is left alone")

    def test_a_whole_state_dict_loads_strictly(self):
        path = self.path("full.pt")
        torch.save(self.src.state_dict(), path)
        model = fresh(3)
        got = load_pretrained(model, path)
        self.assertEqual((got.missing, got.unexpected, got.format), ([], [], "torch"))
        for k, v in self.src.state_dict().items():
            self.assertTrue(same(model.state_dict()[k], v), k)
        npz = self.path("full.npz")
        np.savez(npz, **{k: v.numpy() for k, v in self.src.state_dict().items()})
        model = fresh(4)
        load_pretrained(model, npz)
        self.assertEqual(int(model.bn.num_batches_tracked), 7)

    def test_a_one_element_vector_loads_into_a_0d_parameter(self):
        arrays = params_of(self.src)
        arrays["scale"] = arrays["scale"].reshape(1)  # as tessel.torch registers it
        for path in self.write_all(arrays):
            model = fresh(5)
            load_pretrained(model, path, strict=False)
            self.assertEqual(model.scale.shape, torch.Size([]))
            self.assertTrue(same(model.scale.detach(), self.src.scale.detach()), path)

    def test_every_bad_key_is_named_sorted_and_nothing_changes(self):
        arrays = params_of(self.src)
        del arrays["fc.bias"], arrays["bn.weight"]
        arrays["zz.extra"] = np.zeros(2, np.float32)
        arrays["aa.extra"] = np.zeros(2, np.float32)
        arrays["fc.weight"] = np.zeros((3, 4), np.float32)  # transposed
        for path in self.write_all(arrays):
            model = fresh(6)
            before = snapshot(model)
            with self.assertRaises(ValueError) as cm:
                load_pretrained(model, path)
            msg = str(cm.exception)
            self.assertIn("Missing keys (in the model, not in the file): "
                          "bn.num_batches_tracked, bn.running_mean, bn.running_var, bn.weight, "
                          "fc.bias. ", msg)
            self.assertIn("Unexpected keys (in the file, not in the model): aa.extra, zz.extra. ",
                          msg)
            self.assertIn("Shapes differ: fc.weight: model [4, 3], file [3, 4]", msg)
            for k, v in model.state_dict().items():
                self.assertTrue(same(v, before[k]), f"{path}: {k} changed")
            # Not strict: the mis-shaped key still refuses, and still changes nothing.
            with self.assertRaises(ValueError) as cm:
                load_pretrained(model, path, strict=False)
            self.assertNotIn("Missing keys", str(cm.exception))
            self.assertIn("Shapes differ: fc.weight", str(cm.exception))
            for k, v in model.state_dict().items():
                self.assertTrue(same(v, before[k]), f"{path}: {k} changed")

    def test_unknown_and_malformed_files(self):
        model = fresh(7)
        before = snapshot(model)
        text = self.path("notes.txt")
        with open(text, "w") as f:
            f.write("hello, not a model\n")
        cases = [(text, None, "unknown format")]
        cases.append((text, "onnx", "unknown format 'onnx'"))
        short = self.path("short.safetensors")
        with open(short, "wb") as f:
            f.write((1000).to_bytes(8, "little") + b"{}")
        cases.append((short, None, "passes the end of the file"))
        bad = self.path("bad.safetensors")
        safetensors_ref.write(bad, {"fc.bias": np.zeros(4, np.float32)})
        with open(bad, "rb") as f:
            raw = f.read()
        with open(bad, "wb") as f:
            f.write(raw[:-4])  # the data cut short
        cases.append((bad, None, "tensor 'fc.bias'"))
        listed = self.path("list.pt")
        torch.save([torch.zeros(2)], listed)
        cases.append((listed, None, "not a state_dict"))
        other_zip = self.path("other.zip")
        with zipfile.ZipFile(other_zip, "w") as z:
            z.writestr("readme.txt", "hi")
        cases.append((other_zip, None, "neither torch.save's"))
        for path, fmt, fragment in cases:
            with self.assertRaises(ValueError) as cm:
                load_pretrained(model, path, format=fmt)
            self.assertIn(fragment, str(cm.exception), path)
        for k, v in model.state_dict().items():
            self.assertTrue(same(v, before[k]), k)

    def test_read_tensors_keeps_the_files_order(self):
        arrays = collections.OrderedDict([("z", np.ones(2, np.float32)),
                                          ("a", np.zeros((0, 3), np.float32)),
                                          ("m", np.float32(4).reshape(()))])
        for path in self.write_all(arrays):
            tensors, _ = read_tensors(path)
            self.assertEqual(list(tensors), ["z", "a", "m"], path)
            self.assertEqual([list(t.shape) for t in tensors.values()], [[2], [0, 3], []], path)


if __name__ == "__main__":
    unittest.main()
