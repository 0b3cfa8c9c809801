// accelrt's allocator shim for PyTorch's CUDAPluggableAllocator.
//
// torch.cuda.memory.CUDAPluggableAllocator(path, "accelrt_torch_malloc", "accelrt_torch_free")
// loads this library by path and calls the two functions below by address, with the
// signatures of torch/csrc/cuda/CUDAPluggableAllocator.h:
//
//     void* alloc(size_t size, int device, cudaStream_t stream);
//     void  free(void* ptr, size_t size, int device, cudaStream_t stream);
//
// Both forward to callbacks that accelrt installs with accelrt_torch_set_callbacks() through
// ctypes (accelrt/interop/_shim.py). ctypes callbacks take the GIL themselves, so PyTorch may
// call from any thread, with or without the GIL. Until callbacks are installed (and after they
// are removed, e.g. at interpreter exit) alloc returns NULL and free does nothing.
//
// The exports are plain C; the file is C++ for one reason: PyTorch's pluggable allocator does
// not check the pointer alloc returns, so a NULL would become a tensor at address 0. With
// raise_on_failure set (accelrt.interop.torch sets it), a failed allocation throws a
// std::runtime_error carrying the message accelrt left with accelrt_torch_set_error(), which
// PyTorch turns into a Python RuntimeError. Callers through ctypes leave it off and get NULL.
//
// No Python headers, no CUDA headers (cudaStream_t is an opaque pointer).

#include <atomic>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>

#define ACCELRT_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

typedef void *(*alloc_fn)(size_t size, int device, void *stream);
typedef void (*free_fn)(void *ptr, size_t size, int device, void *stream);

std::atomic<alloc_fn> alloc_cb{nullptr};
std::atomic<free_fn> free_cb{nullptr};
std::atomic<int> raise_on_failure{0};

// Why the last allocation of this thread failed (accelrt_torch_set_error); empty when unknown.
thread_local char last_error[2048];

class AllocationFailed : public std::runtime_error {
  public:
    explicit AllocationFailed(const std::string &what) : std::runtime_error(what) {}
};

}  // namespace

// The version of this interface; accelrt checks it before installing callbacks.
ACCELRT_EXPORT int accelrt_torch_shim_version(void) { return 2; }

// Install (or, with NULLs, remove) the callbacks; raise: throw instead of returning NULL.
ACCELRT_EXPORT int accelrt_torch_set_callbacks(alloc_fn alloc, free_fn release, int raise)
{
    alloc_cb.store(alloc);
    free_cb.store(release);
    raise_on_failure.store(raise);
    return 0;
}

// Called by accelrt's callback (on PyTorch's thread) before it returns NULL.
ACCELRT_EXPORT void accelrt_torch_set_error(const char *message)
{
    std::strncpy(last_error, message ? message : "", sizeof last_error - 1);
    last_error[sizeof last_error - 1] = '\0';
}

ACCELRT_EXPORT void *accelrt_torch_malloc(size_t size, int device, void *stream)
{
    last_error[0] = '\0';
    alloc_fn cb = alloc_cb.load();
    void *ptr = cb != nullptr ? cb(size, device, stream) : nullptr;
    if (ptr == nullptr && size != 0 && raise_on_failure.load()) {
        std::string what = last_error[0] != '\0' ? last_error
                           : cb != nullptr ? "accelrt's allocator returned no memory"
                                           : "accelrt's allocator is no longer installed "
                                             "(the interpreter is exiting)";
        last_error[0] = '\0';
        throw AllocationFailed(what);
    }
    return ptr;
}

ACCELRT_EXPORT void accelrt_torch_free(void *ptr, size_t size, int device, void *stream)
{
    free_fn cb = free_cb.load();
    if (cb == nullptr || ptr == nullptr)
        return;
    cb(ptr, size, device, stream);
}
