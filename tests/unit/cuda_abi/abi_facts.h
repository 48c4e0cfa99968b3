// abi_facts.h: what cuda_abi_test.cpp compares between core/backend/cuda_abi.h and the toolkit's
// cuda.h. Each side is compiled in a file of its own (the two declare the same names) and describes
// itself in the same terms: the values of the constants, the sizes and offsets of the types, and the
// shape of each entry point's parameters, as the ABI sees them.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

namespace tracepool::abi_check {

// The constants tracepool uses, by name.
#define TRACEPOOL_ABI_CONSTANTS(X)                                                                       \
  X(CUDA_SUCCESS) X(CUDA_ERROR_OUT_OF_MEMORY) X(CUDA_ERROR_DEINITIALIZED) X(CUDA_ERROR_STUB_LIBRARY)     \
  X(CUDA_ERROR_LOSSY_QUERY) X(CUDA_ERROR_NOT_FOUND) X(CUDA_ERROR_NOT_READY)                              \
  X(CUDA_ERROR_CONTEXT_IS_DESTROYED) X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)                            \
  X(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) X(CU_EVENT_DISABLE_TIMING)                  \
  X(CU_STREAM_NON_BLOCKING) X(CU_GET_PROC_ADDRESS_LEGACY_STREAM) X(CU_GET_PROC_ADDRESS_SUCCESS)          \
  X(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT) X(CU_STREAM_CAPTURE_STATUS_NONE)                         \
  X(CU_STREAM_CAPTURE_STATUS_ACTIVE) X(CU_STREAM_CAPTURE_MODE_RELAXED) X(CU_MEM_ALLOCATION_TYPE_PINNED)  \
  X(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) X(CU_MEM_ACCESS_FLAGS_PROT_READWRITE)                          \
  X(CU_MEM_LOCATION_TYPE_INVALID) X(CU_MEM_LOCATION_TYPE_DEVICE) X(CU_MEM_LOCATION_TYPE_HOST)            \
  X(CU_MEM_LOCATION_TYPE_HOST_NUMA) X(CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT)

// The types, by size and alignment.
#define TRACEPOOL_ABI_TYPES(X)                                                                           \
  X(cuuint64_t) X(CUdeviceptr) X(CUdevice) X(CUmemGenericAllocationHandle) X(CUcontext) X(CUstream)      \
  X(CUevent) X(CUmodule) X(CUfunction) X(CUlibrary) X(CUkernel) X(CUmemoryPool) X(CUgraph)               \
  X(CUgraphNode) X(CUresult) X(CUdevice_attribute) X(CUdriverProcAddressQueryResult)                     \
  X(CUstreamCaptureStatus) X(CUstreamCaptureMode) X(CUmemAllocationType) X(CUmemAllocationHandleType)    \
  X(CUmemAllocationGranularity_flags) X(CUmemAccess_flags) X(CUmemLocationType) X(CUmemLocation)         \
  X(CUmemAllocationProp) X(CUmemAccessDesc) X(CUjit_option) X(CUlibraryOption) X(CUfunction_attribute)   \
  X(CUfunc_cache) X(CUhostFn)

// The fields tracepool reads or writes, by offset.
#define TRACEPOOL_ABI_FIELDS(X)                                                                          \
  X(CUmemLocation, type) X(CUmemLocation, id) X(CUmemAllocationProp, type)                               \
  X(CUmemAllocationProp, requestedHandleTypes) X(CUmemAllocationProp, location)                          \
  X(CUmemAllocationProp, win32HandleMetaData) X(CUmemAllocationProp, allocFlags)                         \
  X(CUmemAccessDesc, location) X(CUmemAccessDesc, flags)

// A parameter as the calling convention sees it.
struct parameter {
  enum kind_t { integer, floating, pointer, aggregate } kind;
  size_t size;
  size_t pointee;  // for a pointer: the size of what it points to; 0 where that is void, a function or opaque
  bool operator==(const parameter& o) const { return kind == o.kind && size == o.size && pointee == o.pointee; }
};

template <class T, class = void>
struct is_complete : std::false_type {};
template <class T>
struct is_complete<T, std::void_t<decltype(sizeof(T))>> : std::true_type {};

template <class T>
parameter describe_parameter() {
  using P = std::remove_cv_t<T>;
  if constexpr (std::is_pointer_v<P>) {
    using To = std::remove_cv_t<std::remove_pointer_t<P>>;
    size_t pointee = 0;
    if constexpr (!std::is_void_v<To> && !std::is_function_v<To> && is_complete<To>::value) pointee = sizeof(To);
    return {parameter::pointer, sizeof(P), pointee};
  } else if constexpr (std::is_integral_v<P> || std::is_enum_v<P>) {
    return {parameter::integer, sizeof(P), 0};
  } else if constexpr (std::is_floating_point_v<P>) {
    return {parameter::floating, sizeof(P), 0};
  } else {
    return {parameter::aggregate, sizeof(P), 0};
  }
}

template <class F>
struct shape_of;
template <class R, class... A>
struct shape_of<R(A...)> {
  static std::vector<parameter> parameters() { return {describe_parameter<A>()...}; }
  static constexpr size_t result_size = sizeof(R);
};

struct entry_point {
  size_t result_size = 0;
  std::vector<parameter> parameters;
};

struct facts {
  std::map<std::string, long long> constants;
  std::map<std::string, std::pair<size_t, size_t>> types;  // size, alignment
  std::map<std::string, size_t> fields;                   // "type.field": offset
  std::map<std::string, entry_point> entry_points;        // by the name each is exported under
};

template <class F>
entry_point entry_point_of() {
  return {shape_of<F>::result_size, shape_of<F>::parameters()};
}

// What each side compiles: the constants, types and fields listed above, in its own declarations.
#define TRACEPOOL_ABI_DESCRIBE_COMMON(f)                                                                 \
  do {                                                                                                   \
    _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Winvalid-offsetof\"")              \
    TRACEPOOL_ABI_CONSTANTS(TRACEPOOL_ABI_CONSTANT)                                                      \
    TRACEPOOL_ABI_TYPES(TRACEPOOL_ABI_TYPE)                                                              \
    TRACEPOOL_ABI_FIELDS(TRACEPOOL_ABI_FIELD)                                                            \
    _Pragma("GCC diagnostic pop")                                                                        \
  } while (0)
#define TRACEPOOL_ABI_CONSTANT(name) f.constants[#name] = static_cast<long long>(name);
#define TRACEPOOL_ABI_TYPE(name) f.types[#name] = {sizeof(name), alignof(name)};
#define TRACEPOOL_ABI_FIELD(type, field) f.fields[#type "." #field] = offsetof(type, field);

facts ours();     // core/backend/cuda_abi.h (cuda_abi_test.cpp)
facts toolkit();  // cuda.h and cudaTypedefs.h (toolkit.cpp)

}  // namespace tracepool::abi_check
