// capture_probe.cu: which driver calls tracepool makes would break a CUDA graph capture running in the
// process (Note [Capture-safe calls] in core/backend/cuda_backend.cpp). For each capture mode, each
// call and each caller (the capturing thread, another thread), a fresh stream begins capturing a
// kernel, the call is made, the capture ends, and the probe prints what the call returned and whether
// the capture survived. Prints one table; exit status 0 whenever the table could be made.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

__global__ void touch(int* p) { p[threadIdx.x] += 1; }

const char* mode_name(cudaStreamCaptureMode m) {
  return m == cudaStreamCaptureModeGlobal ? "global" : m == cudaStreamCaptureModeThreadLocal ? "thread_local" : "relaxed";
}

std::string code(CUresult r) {
  if (r == CUDA_SUCCESS) return "ok";
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  return name != nullptr ? name : "?";
}

struct fixture {
  CUstream other;         // a stream that is not capturing
  CUevent done_event;     // recorded on `other` before the capture, long complete
  CUdeviceptr old_block;  // allocated before the capture
  CUstream capturing;
};

// Each call: what it does with the fixture; returns the driver's result.
struct call {
  const char* name;
  std::function<CUresult(fixture&)> run;
};

CUresult relaxed(const std::function<CUresult()>& f) {
  CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
  cuThreadExchangeStreamCaptureMode(&m);
  const CUresult r = f();
  cuThreadExchangeStreamCaptureMode(&m);
  return r;
}

}  // namespace

int main() {
  if (cudaFree(nullptr) != cudaSuccess) {
    std::printf("capture probe: no usable CUDA device\n");
    return 1;
  }
  int* data = nullptr;
  cudaMalloc(&data, 1024);
  CUcontext ctx = nullptr;
  cuCtxGetCurrent(&ctx);

  std::vector<call> calls = {
      {"cuMemAlloc", [](fixture&) { CUdeviceptr p = 0; CUresult r = cuMemAlloc(&p, 1 << 20); if (p) cuMemFree(p); return r; }},
      {"cuMemAlloc (relaxed)", [](fixture&) {
         CUdeviceptr p = 0;
         CUresult r = relaxed([&] { return cuMemAlloc(&p, 1 << 20); });
         // freed after the capture ended, by the caller of the probe (leaked 1 MiB per mode: fine)
         return r;
       }},
      {"cuMemFree", [](fixture& f) { CUresult r = cuMemFree(f.old_block); f.old_block = 0; return r; }},
      {"cuMemFree (relaxed)", [](fixture& f) {
         CUresult r = relaxed([&] { return cuMemFree(f.old_block); });
         f.old_block = 0;
         return r;
       }},
      {"cuEventQuery (event of another stream)", [](fixture& f) { return cuEventQuery(f.done_event); }},
      {"cuEventSynchronize (event of another stream)", [](fixture& f) { return cuEventSynchronize(f.done_event); }},
      {"cuEventRecord on another stream", [](fixture& f) { return cuEventRecord(f.done_event, f.other); }},
      {"cuEventRecord on the capturing stream", [](fixture& f) {
         CUevent e = nullptr;
         cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
         CUresult r = cuEventRecord(e, f.capturing);
         return r;
       }},
      {"cuMemGetInfo", [](fixture&) { size_t a = 0, b = 0; return cuMemGetInfo(&a, &b); }},
      {"cuStreamQuery (another stream)", [](fixture& f) { return cuStreamQuery(f.other); }},
  };

  std::printf("%-46s %-13s %-8s %-34s %s\n", "call", "mode", "caller", "returned", "capture");
  for (cudaStreamCaptureMode mode :
       {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed}) {
    for (const call& c : calls) {
      for (int other_thread = 0; other_thread < 2; ++other_thread) {
        fixture f{};
        cuStreamCreate(&f.other, CU_STREAM_NON_BLOCKING);
        cuEventCreate(&f.done_event, CU_EVENT_DISABLE_TIMING);
        cuEventRecord(f.done_event, f.other);
        cuStreamSynchronize(f.other);
        cuMemAlloc(&f.old_block, 1 << 20);
        cudaStream_t s = nullptr;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        f.capturing = reinterpret_cast<CUstream>(s);
        cudaError_t begin = cudaStreamBeginCapture(s, mode);
        touch<<<1, 32, 0, s>>>(data);
        CUresult r = CUDA_SUCCESS;
        if (other_thread) {
          std::thread t([&] {
            cuCtxSetCurrent(ctx);
            r = c.run(f);
          });
          t.join();
        } else {
          r = c.run(f);
        }
        touch<<<1, 32, 0, s>>>(data);
        cudaGraph_t g = nullptr;
        cudaError_t end = cudaStreamEndCapture(s, &g);
        std::string survived = begin != cudaSuccess ? std::string("not begun: ") + cudaGetErrorName(begin)
                               : end == cudaSuccess ? "survived"
                                                    : std::string("BROKEN: ") + cudaGetErrorName(end);
        std::printf("%-46s %-13s %-8s %-34s %s\n", c.name, mode_name(mode), other_thread ? "other" : "same",
                    code(r).c_str(), survived.c_str());
        if (g != nullptr) cudaGraphDestroy(g);
        cudaGetLastError();  // a broken capture leaves a sticky-free error behind: clear it
        cudaStreamDestroy(s);
        if (f.old_block) cuMemFree(f.old_block);
        cuEventDestroy(f.done_event);
        cuStreamDestroy(f.other);
      }
    }
  }
  // The process is still usable: a plain allocation and kernel after all of the above.
  int* after = nullptr;
  const cudaError_t ok = cudaMalloc(&after, 1024);
  touch<<<1, 32>>>(after);
  const cudaError_t sync = cudaDeviceSynchronize();
  std::printf("after the probe: cudaMalloc %s, kernel %s\n", cudaGetErrorName(ok), cudaGetErrorName(sync));
  return ok == cudaSuccess && sync == cudaSuccess ? 0 : 1;
}
