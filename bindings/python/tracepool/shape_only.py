"""tracepool.shape_only: tensors that hold device memory of their size and nothing else.

What a CUDA tensor holds, without the numbers: tracepool memory of the tensor's size (float32), freed
when the object is dropped, as a tensor's storage is. They stand in for a framework's tensors where
there is none (the demo, examples/leaky_training.py, on a machine without PyTorch or a GPU), on
whatever backend the default instance has: the host backend's emulated device without a GPU.

Like a framework's, this code is a library's, not the program's: reports lead each site with the
program's own line (the one that multiplied or built the tensor) and name the method here after
"via". Each tensor shows its memory as CuPy's and Numba's arrays do (the CUDA Array Interface), so
that a report names the Python object that holds a leaked block.
"""

from __future__ import annotations

import tracepool


class ShapeOnlyTensor:
    """A float32 tensor of `shape`: its bytes are allocated from tracepool, its values never exist.
    Only the operations examples/leaky_training.py uses."""

    def __init__(self, *shape: int) -> None:
        self.shape = shape
        nbytes = 4
        for n in shape:
            nbytes *= n
        self.ptr = tracepool.alloc(nbytes)
        self.__cuda_array_interface__ = {"data": (self.ptr, False), "shape": shape, "typestr": "<f4", "version": 3}

    def __del__(self) -> None:
        tracepool.free(self.ptr)

    def __matmul__(self, other: ShapeOnlyTensor) -> ShapeOnlyTensor:
        return ShapeOnlyTensor(self.shape[0], other.shape[1])

    def relu(self) -> ShapeOnlyTensor:
        return ShapeOnlyTensor(*self.shape)

    def square(self) -> ShapeOnlyTensor:
        return ShapeOnlyTensor(*self.shape)

    def mean(self) -> ShapeOnlyTensor:
        return ShapeOnlyTensor(1)

    def backward(self) -> None:
        pass
