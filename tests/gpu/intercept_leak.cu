// intercept_leak.cu: a CUDA C++ program that knows nothing of tracepool, for the interposer's GPU rows
// (tests/gpu/intercept_check.py, run by tests/gpu/run.sh with TRACEPOOL_GPU_STEPS=intercept). Built by the check
// with nvcc, with the static CUDA runtime (nvcc's default) and with -cudart shared, linked with -lcuda for
// one driver-API call.
//   intercept_leak leak        keeps 64 MiB (load_table, cudaMalloc), 16 MiB pinned (pinned_staging,
//                              cudaMallocHost), 8 MiB managed (managed_buffer), 32 MiB stream-ordered
//                              (async_buffer, cudaMallocAsync) and 4 MiB of VMM memory (vmm_chunk, cuMemCreate);
//                              frees 100 x 8 MiB (scratch_loop); prints the driver's used bytes
//   intercept_leak bench N     N pairs of cudaMalloc(1 MiB) + cudaFree after a warm-up; prints ns per pair
//   intercept_leak bare        makes its context (cudaFree(0)) and nothing else; prints the driver's used bytes
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CHECK(call)                                                                              \
  do {                                                                                           \
    if (auto e = (call); e != 0) {                                                               \
      std::fprintf(stderr, "%s failed: %d at %s:%d\n", #call, static_cast<int>(e), __FILE__, __LINE__); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

__global__ void fill(float* p, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = 1.0f;
}

__attribute__((noinline)) float* load_table(size_t bytes) {
  float* p = nullptr;
  CHECK(cudaMalloc(&p, bytes));
  fill<<<256, 256>>>(p, bytes / sizeof(float));
  return p;
}

__attribute__((noinline)) void scratch_loop() {
  for (int i = 0; i < 100; ++i) {
    void* p = nullptr;
    CHECK(cudaMalloc(&p, 8 << 20));
    CHECK(cudaFree(p));
  }
}

__attribute__((noinline)) void* pinned_staging() {
  void* p = nullptr;
  CHECK(cudaMallocHost(&p, 16 << 20));
  return p;
}

__attribute__((noinline)) void* managed_buffer() {
  void* p = nullptr;
  CHECK(cudaMallocManaged(&p, 8 << 20));
  return p;
}

__attribute__((noinline)) void* async_buffer(cudaStream_t s) {
  void* p = nullptr;
  CHECK(cudaMallocAsync(&p, 32 << 20, s));
  CHECK(cudaStreamSynchronize(s));
  return p;
}

__attribute__((noinline)) CUmemGenericAllocationHandle vmm_chunk() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle h = 0;
  CHECK(cuMemCreate(&h, 4 << 20, &prop, 0));
  return h;
}

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "leak") == 0) {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    volatile void* kept[5] = {load_table(64 << 20), pinned_staging(), managed_buffer(), async_buffer(s),
                              reinterpret_cast<void*>(vmm_chunk())};
    (void)kept;
    scratch_loop();
    CHECK(cudaDeviceSynchronize());
    size_t free_bytes = 0, total = 0;
    CHECK(cudaMemGetInfo(&free_bytes, &total));
    std::printf("used_bytes %zu\n", total - free_bytes);
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "bare") == 0) {
    CHECK(cudaFree(nullptr));
    size_t free_bytes = 0, total = 0;
    CHECK(cudaMemGetInfo(&free_bytes, &total));
    std::printf("used_bytes %zu\n", total - free_bytes);
    return 0;
  }
  if (argc == 3 && std::strcmp(argv[1], "bench") == 0) {
    const int n = std::atoi(argv[2]);
    void* p = nullptr;
    for (int i = 0; i < 100; ++i) {  // warm-up
      CHECK(cudaMalloc(&p, 1 << 20));
      CHECK(cudaFree(p));
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      CHECK(cudaMalloc(&p, 1 << 20));
      CHECK(cudaFree(p));
    }
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    std::printf("ns_per_pair %.1f\n", ns / n);
    return 0;
  }
  std::fprintf(stderr, "usage: intercept_leak leak | bench N | bare\n");
  return 2;
}
