"""How Python objects show device memory, for the holder search (Note [Who holds it] in _holders.py):
a torch tensor by its storage, CuPy and Numba arrays by __cuda_array_interface__ (a property of their
type, or an attribute of the object itself, as the CUDA Array Interface allows), anything else by a
DLPack capsule read with ctypes. Each function takes an object and returns the address its data starts
at; `address` turns a failure into None. Standard library only."""

from __future__ import annotations

import ctypes
import operator


class _DLTensor(ctypes.Structure):
    """The head of dlpack.h's DLManagedTensor: enough to read where the data starts."""

    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("byte_offset", ctypes.c_uint64)]


# A function object of our own: setting restype on ctypes.pythonapi's would change it for everyone.
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


def tensor_address(tensor):
    return tensor.untyped_storage().data_ptr()


def interface_address(obj):
    return int(obj.__cuda_array_interface__["data"][0])


def own_interface_address(obj):
    """interface_address for an object that carries the interface itself: read as instance_exposers judged it,
    running none of the program's code (an object of the type without it raises AttributeError here, no
    __getattr__ called)."""
    interface = object.__getattribute__(obj, "__cuda_array_interface__")
    if type(interface) is not dict:
        raise TypeError("not a dict")
    address = interface["data"][0]
    if type(address) is not int:
        raise TypeError("not an int")
    return address


def dlpack_address(obj):
    try:
        capsule = obj.__dlpack__()
    except TypeError:
        capsule = obj.__dlpack__(stream=None)
    # The capsule keeps its name, so its destructor still calls the producer's deleter.
    head = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    return (head.data or 0) + head.byte_offset


grad_fn = operator.attrgetter("grad_fn")


def address(expose, obj):
    """Where `obj`'s data starts; None for a broken object (a meta, sparse or fake tensor), or one whose own
    code raises anything, SystemExit and KeyboardInterrupt too: the search goes on without it."""
    try:
        return expose(obj)
    except BaseException:
        return None


_dictoffset = type.__dict__["__dictoffset__"]  # read from the type itself: no metaclass's property of that name


def instance_exposers(samples):
    """type -> own_interface_address for the types in `samples` (type -> one of its objects) whose objects carry
    __cuda_array_interface__ themselves, an attribute set on the object rather than a property of its type:
    judged by that one object, read with object.__getattribute__, which runs none of the program's code (no
    __getattr__ or __getattribute__ of the type; the type has no such attribute, so no descriptor either)."""
    found = {}
    for tp, obj in samples.items():
        try:
            if _dictoffset.__get__(tp, type) == 0:  # its objects have no attributes of their own
                continue
            own_interface_address(obj)
            found[tp] = own_interface_address
        except BaseException:  # not there (AttributeError), or a broken object: the type is skipped
            pass
    return found


def exposers(types_seen, tensor_type):
    """type -> how its objects show device memory, for the types in `types_seen` that do."""
    found = {}
    for tp in types_seen:
        try:
            if tensor_type is not None and issubclass(tp, tensor_type):
                found[tp] = tensor_address
            elif hasattr(tp, "__cuda_array_interface__"):
                found[tp] = interface_address
            elif hasattr(tp, "__dlpack__"):
                found[tp] = dlpack_address
        except BaseException:  # a metaclass's own code raised: the type is skipped
            pass
    return found
