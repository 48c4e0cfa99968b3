/* stand_in_cuda.c: a stand-in for the NVIDIA driver (libcuda.so.1) for tests on machines without a GPU:
 * a handful of the driver API's entry points over host memory, exported under their versioned names
 * and through cuGetProcAddress / cuGetProcAddress_v2, as the real driver offers them (CUDA 13.0's
 * cuda.h; docs/research/cuda-driver-interposition.md). What a program or tracepool's interposer does
 * with the driver can then be tested here: binding at link time, by dlsym and by cuGetProcAddress,
 * threads, fork, and a driver that lacks most entry points.
 *
 * Written from the documented ABI, without cuda.h: CUresult is an int, CUdeviceptr a 64-bit integer,
 * handles are pointers. One device (STAND_IN_CUDA_DEVICES=N for more) of 16 GiB; "device memory" is
 * host memory from malloc, 256-byte aligned; what is allocated is counted, so cuMemGetInfo's free
 * memory falls as the program allocates. Every entry point is thread-safe.
 *
 * Built twice (tests/CMakeLists.txt): STAND_IN_MINIMAL exports only the entry points listed above the
 * marker below (what issue 34's separate check offers: a driver that lacks nearly everything); the full
 * one adds the other ways programs get memory (pitch, managed, pinned host, pool, VMM handles), and the
 * primary context, modules, lazily loaded code, streams and peer access, which take device memory of their own. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long cuuint64_t;
typedef void* CUcontext;
typedef void* CUstream;
typedef int CUdriverProcAddressQueryResult;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
  CUDA_ERROR_PEER_ACCESS_NOT_ENABLED = 705,
};
enum { CU_GET_PROC_ADDRESS_SUCCESS = 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1 };

#define EXPORT __attribute__((visibility("default")))

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialised; /* read and written with __atomic builtins */
static unsigned long long allocated;            /* bytes handed out, all devices */
static const unsigned long long total = 16ull << 30;
static char context_object;                     /* the one (primary) context's handle */

/* Each allocation's size lives just before the address handed out. */
enum { header = 256 };

static int is_initialised(void) { return __atomic_load_n(&initialised, __ATOMIC_ACQUIRE); }

static int device_count(void) {
  const char* n = getenv("STAND_IN_CUDA_DEVICES");
  const int count = n != NULL ? atoi(n) : 1;
  return count > 0 && count <= 64 ? count : 1;
}

static CUresult allocate(CUdeviceptr* out, size_t size) {
  if (out == NULL) return CUDA_ERROR_INVALID_VALUE;
  *out = 0;
  if (!is_initialised()) return CUDA_ERROR_NOT_INITIALIZED;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  const int fits = size <= total - allocated;
  if (fits) allocated += size;
  pthread_mutex_unlock(&lock);
  if (!fits) return CUDA_ERROR_OUT_OF_MEMORY;
  char* block = NULL;
  if (posix_memalign((void**)&block, header, header + size) != 0) {
    pthread_mutex_lock(&lock);
    allocated -= size;
    pthread_mutex_unlock(&lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  memcpy(block, &size, sizeof size);
  *out = (CUdeviceptr)(uintptr_t)(block + header);
  return CUDA_SUCCESS;
}

static CUresult release(CUdeviceptr ptr) {
  if (!is_initialised()) return CUDA_ERROR_NOT_INITIALIZED;
  if (ptr == 0) return CUDA_SUCCESS;
  char* block = (char*)(uintptr_t)ptr - header;
  size_t size = 0;
  memcpy(&size, block, sizeof size);
  free(block);
  pthread_mutex_lock(&lock);
  allocated -= size;
  pthread_mutex_unlock(&lock);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuInit(unsigned flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  __atomic_store_n(&initialised, 1, __ATOMIC_RELEASE);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int* version) {
  if (version == NULL) return CUDA_ERROR_INVALID_VALUE;
  *version = 13000;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int* count) {
  if (count == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (!is_initialised()) return CUDA_ERROR_NOT_INITIALIZED;
  *count = device_count();
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (!is_initialised()) return CUDA_ERROR_NOT_INITIALIZED;
  if (ordinal < 0 || ordinal >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext* context) {
  if (context == NULL) return CUDA_ERROR_INVALID_VALUE;
  *context = is_initialised() ? (CUcontext)&context_object : NULL;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
  if (device == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (!is_initialised()) return CUDA_ERROR_NOT_INITIALIZED;
  *device = 0;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == NULL || total_bytes == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (!is_initialised()) return CUDA_ERROR_NOT_INITIALIZED;
  pthread_mutex_lock(&lock);
  *free_bytes = (size_t)(total - allocated);
  pthread_mutex_unlock(&lock);
  *total_bytes = (size_t)total;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* ptr, size_t size) { return allocate(ptr, size); }
EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr) { return release(ptr); }
EXPORT CUresult cuMemAllocAsync(CUdeviceptr* ptr, size_t size, CUstream stream) {
  (void)stream;  /* host memory: ready at once, on every stream */
  return allocate(ptr, size);
}
EXPORT CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream stream) {
  (void)stream;
  return release(ptr);
}

#ifndef STAND_IN_MINIMAL
/* ---- Only in the full stand-in ------------------------------------------------------------------ */
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* ptr, size_t* pitch, size_t width, size_t height, unsigned element) {
  if (pitch == NULL || width == 0 || height == 0 || (element != 4 && element != 8 && element != 16))
    return CUDA_ERROR_INVALID_VALUE;
  *pitch = (width + 511) / 512 * 512;
  return allocate(ptr, *pitch * height);
}
EXPORT CUresult cuMemAllocManaged(CUdeviceptr* ptr, size_t size, unsigned flags) {
  (void)flags;
  return allocate(ptr, size);
}
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* ptr, size_t size, void* pool, CUstream stream) {
  (void)pool, (void)stream;
  return allocate(ptr, size);
}
/* Pinned host memory is host memory that the device's free figure does not count. */
EXPORT CUresult cuMemHostAlloc(void** ptr, size_t size, unsigned flags) {
  (void)flags;
  if (ptr == NULL || size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!is_initialised()) return CUDA_ERROR_NOT_INITIALIZED;
  *ptr = malloc(size);
  return *ptr != NULL ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
EXPORT CUresult cuMemAllocHost_v2(void** ptr, size_t size) { return cuMemHostAlloc(ptr, size, 0); }
EXPORT CUresult cuMemFreeHost(void* ptr) {
  if (!is_initialised()) return CUDA_ERROR_NOT_INITIALIZED;
  free(ptr);
  return CUDA_SUCCESS;
}
/* A VMM handle is the address of the memory behind it (never mapped anywhere else here). */
EXPORT CUresult cuMemCreate(unsigned long long* handle, size_t size, const void* prop, unsigned long long flags) {
  if (handle == NULL || prop == NULL || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return allocate(handle, size);
}
EXPORT CUresult cuMemRelease(unsigned long long handle) { return release(handle); }

/* The primary context takes 96 MiB of the device while retained; a module 4 MiB while loaded (its handle is
 * the address of that memory). */
enum { context_bytes = 96 << 20, module_bytes = 4 << 20 };
static int primary_refs; /* under lock */

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
  if (context == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (!is_initialised()) return CUDA_ERROR_NOT_INITIALIZED;
  if (device < 0 || device >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&lock);
  const int fits = primary_refs > 0 || context_bytes <= total - allocated;
  if (fits && primary_refs++ == 0) allocated += context_bytes;
  pthread_mutex_unlock(&lock);
  if (!fits) return CUDA_ERROR_OUT_OF_MEMORY;
  *context = (CUcontext)&context_object;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  if (device < 0 || device >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&lock);
  if (primary_refs > 0 && --primary_refs == 0) allocated -= context_bytes;
  pthread_mutex_unlock(&lock);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice device, unsigned* flags, int* active) {
  if (flags == NULL || active == NULL || device < 0 || device >= device_count()) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  *active = primary_refs > 0;
  pthread_mutex_unlock(&lock);
  *flags = 0;
  return CUDA_SUCCESS;
}
/* One context, always current once initialised: pushing and popping change nothing. */
EXPORT CUresult cuCtxPushCurrent_v2(CUcontext context) { return context != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* context) {
  if (context != NULL) *context = (CUcontext)&context_object;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuModuleLoadData(void** module, const void* image) {
  if (module == NULL || image == NULL) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr memory = 0;
  const CUresult r = allocate(&memory, module_bytes);
  *module = r == CUDA_SUCCESS ? (void*)(uintptr_t)memory : NULL;
  return r;
}
EXPORT CUresult cuModuleUnload(void* module) { return release((CUdeviceptr)(uintptr_t)module); }

/* Lazy loading: the first use of a function (its launch, or a question about it) loads its code, 2 MiB of the
 * device, kept; later uses load nothing (there is no device to run on). A function is any non-NULL handle. */
enum { lazy_code_bytes = 2 << 20, most_functions = 64 };
static const void* loaded_functions[most_functions]; /* under lock */

static CUresult use_function(const void* f) {
  if (f == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (!is_initialised()) return CUDA_ERROR_NOT_INITIALIZED;
  pthread_mutex_lock(&lock);
  int i = 0;
  while (i < most_functions && loaded_functions[i] != NULL && loaded_functions[i] != f) ++i;
  const int load = i < most_functions && loaded_functions[i] == NULL && lazy_code_bytes <= total - allocated;
  if (load) {
    loaded_functions[i] = f;
    allocated += lazy_code_bytes;
  }
  pthread_mutex_unlock(&lock);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned shared, CUstream stream, void** params, void** extra) {
  (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared, (void)stream, (void)params, (void)extra;
  return use_function(f);
}

EXPORT CUresult cuFuncGetAttribute(int* value, int attribute, void* f) {
  (void)attribute;
  if (value == NULL) return CUDA_ERROR_INVALID_VALUE;
  *value = 0;
  return use_function(f);
}

/* A stream takes 2 MiB of the device until it is destroyed (as some do on an H100). */
enum { stream_bytes = 2 << 20 };

EXPORT CUresult cuStreamCreate(CUstream* stream, unsigned flags) {
  (void)flags;
  CUdeviceptr made = 0;
  const CUresult r = stream != NULL ? allocate(&made, stream_bytes) : CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) *stream = (CUstream)(uintptr_t)made;
  return r;
}

EXPORT CUresult cuStreamCreateWithPriority(CUstream* stream, unsigned flags, int priority) {
  (void)priority;
  return cuStreamCreate(stream, flags);
}

EXPORT CUresult cuStreamDestroy_v2(CUstream stream) { return release((CUdeviceptr)(uintptr_t)stream); }

/* Peer access to a context maps it here at a cost of 2 MiB, until disabled (one peer at a time: the stand-in has
 * one context, and a program that enables access to it twice gets the real driver's answer). */
enum { peer_bytes = 2 << 20 };
static CUdeviceptr peer_mapping; /* under lock: 0 while no peer access is enabled */

enum { peer_enabling = 1 }; /* peer_mapping while one thread enables access, outside the lock */

EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned flags) {
  if (peer == NULL || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  const int enabled = peer_mapping != 0;
  if (!enabled) peer_mapping = peer_enabling; /* claimed: a second caller now finds it enabled */
  pthread_mutex_unlock(&lock);
  if (enabled) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  CUdeviceptr made = 0;
  const CUresult r = allocate(&made, peer_bytes);
  pthread_mutex_lock(&lock);
  peer_mapping = r == CUDA_SUCCESS ? made : 0;
  pthread_mutex_unlock(&lock);
  return r;
}

EXPORT CUresult cuCtxDisablePeerAccess(CUcontext peer) {
  if (peer == NULL) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  const CUdeviceptr mapping = peer_mapping;
  if (mapping != peer_enabling) peer_mapping = 0;
  pthread_mutex_unlock(&lock);
  if (mapping == peer_enabling) return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED; /* not yet */
  return mapping != 0 ? release(mapping) : CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
}
#endif

static const struct { CUresult code; const char* name; const char* text; } errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
};

static CUresult describe(CUresult code, const char** out, int name) {
  if (out == NULL) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; ++i)
    if (errors[i].code == code) {
      *out = name ? errors[i].name : errors[i].text;
      return CUDA_SUCCESS;
    }
  *out = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorName(CUresult code, const char** name) { return describe(code, name, 1); }
EXPORT CUresult cuGetErrorString(CUresult code, const char** text) { return describe(code, text, 0); }

EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult* status);

/* What cuGetProcAddress resolves: the base name (no _v2: the version argument picks the ABI; here every
 * entry point has one ABI, the one exported). */
static const struct { const char* name; void* fn; } table[] = {
    {"cuInit", (void*)cuInit},
    {"cuDriverGetVersion", (void*)cuDriverGetVersion},
    {"cuDeviceGetCount", (void*)cuDeviceGetCount},
    {"cuDeviceGet", (void*)cuDeviceGet},
    {"cuCtxGetCurrent", (void*)cuCtxGetCurrent},
    {"cuCtxGetDevice", (void*)cuCtxGetDevice},
    {"cuMemGetInfo", (void*)cuMemGetInfo_v2},
    {"cuMemAlloc", (void*)cuMemAlloc_v2},
    {"cuMemFree", (void*)cuMemFree_v2},
    {"cuMemAllocAsync", (void*)cuMemAllocAsync},
    {"cuMemFreeAsync", (void*)cuMemFreeAsync},
    {"cuGetErrorName", (void*)cuGetErrorName},
    {"cuGetErrorString", (void*)cuGetErrorString},
#ifndef STAND_IN_MINIMAL
    {"cuMemAllocPitch", (void*)cuMemAllocPitch_v2},
    {"cuMemAllocManaged", (void*)cuMemAllocManaged},
    {"cuMemAllocFromPoolAsync", (void*)cuMemAllocFromPoolAsync},
    {"cuMemHostAlloc", (void*)cuMemHostAlloc},
    {"cuMemAllocHost", (void*)cuMemAllocHost_v2},
    {"cuMemFreeHost", (void*)cuMemFreeHost},
    {"cuMemCreate", (void*)cuMemCreate},
    {"cuMemRelease", (void*)cuMemRelease},
    {"cuDevicePrimaryCtxRetain", (void*)cuDevicePrimaryCtxRetain},
    {"cuDevicePrimaryCtxRelease", (void*)cuDevicePrimaryCtxRelease_v2},
    {"cuDevicePrimaryCtxGetState", (void*)cuDevicePrimaryCtxGetState},
    {"cuCtxPushCurrent", (void*)cuCtxPushCurrent_v2},
    {"cuCtxPopCurrent", (void*)cuCtxPopCurrent_v2},
    {"cuModuleLoadData", (void*)cuModuleLoadData},
    {"cuModuleUnload", (void*)cuModuleUnload},
    {"cuLaunchKernel", (void*)cuLaunchKernel},
    {"cuFuncGetAttribute", (void*)cuFuncGetAttribute},
    {"cuStreamCreate", (void*)cuStreamCreate},
    {"cuStreamCreateWithPriority", (void*)cuStreamCreateWithPriority},
    {"cuStreamDestroy", (void*)cuStreamDestroy_v2},
    {"cuCtxEnablePeerAccess", (void*)cuCtxEnablePeerAccess},
    {"cuCtxDisablePeerAccess", (void*)cuCtxDisablePeerAccess},
#endif
};

EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags);

/* As the real driver: an unknown symbol is CUDA_SUCCESS with *pfn NULL, and *status says why. */
EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult* status) {
  (void)flags;
  if (symbol == NULL || pfn == NULL || version <= 0) return CUDA_ERROR_INVALID_VALUE;
  *pfn = NULL;
  for (size_t i = 0; i < sizeof table / sizeof table[0]; ++i)
    if (strcmp(symbol, table[i].name) == 0) *pfn = table[i].fn;
  if (strcmp(symbol, "cuGetProcAddress") == 0)  /* the ABI of the version asked: 5 arguments from 12.0 */
    *pfn = version >= 12000 ? (void*)cuGetProcAddress_v2 : (void*)cuGetProcAddress;
  if (status != NULL) *status = *pfn != NULL ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_SUCCESS;
}

/* The CUDA 11.3 ABI, four arguments, still exported under the bare name. */
EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
