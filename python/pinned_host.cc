// CudaPinnedAllocator: cuMemHostAlloc/cuMemFreeHost in the device's primary
// context, through the driver API resolved with dlopen/dlsym.
#include "python/pinned_host.h"

#include <dlfcn.h>

#include <memory>
#include <new>
#include <string>
#include <type_traits>

namespace shardkit {
namespace {

// The driver API's types and the one flag used, as cuda.h defines them.
using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
constexpr unsigned kMemHostAllocPortable = 0x01;  // CU_MEMHOSTALLOC_PORTABLE

struct Driver {
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*primary_retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*primary_release)(CUdevice) = nullptr;
  CUresult (*push)(CUcontext) = nullptr;
  CUresult (*pop)(CUcontext*) = nullptr;
  CUresult (*host_alloc)(void**, size_t, unsigned) = nullptr;
  CUresult (*free_host)(void*) = nullptr;
  CUresult (*error_string)(CUresult, const char**) = nullptr;
  std::string missing;  // why the driver cannot be used; empty: it can

  std::string Describe(CUresult r) const {
    const char* text = nullptr;
    if (error_string != nullptr && error_string(r, &text) == 0 && text != nullptr) {
      return std::string(text) + " (CUresult " + std::to_string(r) + ")";
    }
    return "CUresult " + std::to_string(r);
  }
};

// Opened once, never closed (buffers may be freed at exit).
const Driver& TheDriver() {
  static const Driver driver = [] {
    Driver d;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      d.missing = "libcuda.so.1 (the NVIDIA driver) cannot be opened: " +
                  std::string(why != nullptr ? why : "not found");
      return d;
    }
    auto find = [&](const char* name, auto** fn) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(lib, name));
      if (*fn == nullptr && d.missing.empty())
        d.missing = std::string("libcuda.so.1 has no ") + name + " (a driver older than CUDA 11?)";
    };
    find("cuInit", &d.init);
    find("cuDeviceGet", &d.device_get);
    find("cuDevicePrimaryCtxRetain", &d.primary_retain);
    find("cuDevicePrimaryCtxRelease_v2", &d.primary_release);
    find("cuCtxPushCurrent_v2", &d.push);
    find("cuCtxPopCurrent_v2", &d.pop);
    find("cuMemHostAlloc", &d.host_alloc);
    find("cuMemFreeHost", &d.free_host);
    find("cuGetErrorString", &d.error_string);
    if (d.missing.empty()) {
      const CUresult r = d.init(0);
      if (r != 0) d.missing = "cuInit failed: " + d.Describe(r);
    }
    return d;
  }();
  return driver;
}

// The device's primary context, retained while any buffer or the allocator lives.
struct PrimaryContext {
  const Driver* driver;
  CUdevice device = 0;
  CUcontext context = nullptr;
  ~PrimaryContext() { driver->primary_release(device); }

  // f() with the context current on this thread (a ring's producer, or
  // whichever thread drops the last lease).
  template <typename F>
  CUresult InContext(F f) const {
    CUresult r = driver->push(context);
    if (r != 0) return r;
    r = f();
    CUcontext popped = nullptr;
    driver->pop(&popped);
    return r;
  }
};

}  // namespace

Result<SlotAllocator> CudaPinnedAllocator(int device) {
  const Driver& d = TheDriver();
  if (!d.missing.empty()) return Status::Unsupported("pinned memory: " + d.missing);
  CUdevice dev = 0;
  CUcontext context = nullptr;
  CUresult r = d.device_get(&dev, device);
  if (r == 0) r = d.primary_retain(&context, dev);
  if (r != 0) {
    return Status::Unsupported("pinned memory: CUDA device " + std::to_string(device) + ": " +
                               d.Describe(r));
  }
  auto ctx = std::make_shared<PrimaryContext>();  // releases the context when the last user goes
  ctx->driver = &d;
  ctx->device = dev;
  ctx->context = context;
  return SlotAllocator([ctx](size_t bytes) -> std::shared_ptr<uint8_t> {
    void* p = nullptr;
    const CUresult got = ctx->InContext(
        [&] { return ctx->driver->host_alloc(&p, bytes > 0 ? bytes : 1, kMemHostAllocPortable); });
    if (got != 0 || p == nullptr) throw std::bad_alloc();
    return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [ctx](uint8_t* q) {
      ctx->InContext([&] { return ctx->driver->free_host(q); });
    });
  });
}

}  // namespace shardkit
