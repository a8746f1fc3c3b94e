// fault: an MPS client that raises a fatal GPU exception (a kernel storing
// to address 0), for the MPSClientTerminated check of test/gpu/run.sh.
// Built with gcc alone like memalloc: the driver API comes from
// libcuda.so.1 and the kernel is PTX, compiled by the driver at load.
//
//   fault    print "fault: <error of the synchronisation>" (NVIDIA's MPS
//   error containment: every client of the GPU gets the exception); exit 0
//   when the kernel faulted, 1 when it did not, 2 when CUDA failed before.
#include <dlfcn.h>
#include <stdio.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;

static const char ptx[] =
	".version 7.0\n.target sm_70\n.address_size 64\n"
	".visible .entry fault() {\n"
	"  .reg .b64 %rd<2>;\n  .reg .b32 %r<2>;\n"
	"  mov.u64 %rd1, 0;\n  mov.u32 %r1, 1;\n  st.global.u32 [%rd1], %r1;\n  ret;\n}\n";

int main(void) {
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);
	if (!lib) { fprintf(stderr, "fault: %s\n", dlerror()); return 2; }
	CUresult (*cuInit)(unsigned) = dlsym(lib, "cuInit");
	CUresult (*cuDeviceGet)(CUdevice *, int) = dlsym(lib, "cuDeviceGet");
	CUresult (*cuCtxCreate)(CUcontext *, unsigned, CUdevice) = dlsym(lib, "cuCtxCreate_v2");
	CUresult (*cuModuleLoadData)(CUmodule *, const void *) = dlsym(lib, "cuModuleLoadData");
	CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *) = dlsym(lib, "cuModuleGetFunction");
	CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **) =
		dlsym(lib, "cuLaunchKernel");
	CUresult (*cuCtxSynchronize)(void) = dlsym(lib, "cuCtxSynchronize");
	CUresult (*cuGetErrorName)(CUresult, const char **) = dlsym(lib, "cuGetErrorName");
	if (!cuInit || !cuDeviceGet || !cuCtxCreate || !cuModuleLoadData || !cuModuleGetFunction || !cuLaunchKernel || !cuCtxSynchronize || !cuGetErrorName) {
		fprintf(stderr, "fault: libcuda lacks a driver API entry point\n");
		return 2;
	}
	CUdevice dev; CUcontext ctx; CUmodule mod; CUfunction fn; CUresult r;
	const char *name = "?";
	if ((r = cuInit(0)) || (r = cuDeviceGet(&dev, 0)) || (r = cuCtxCreate(&ctx, 0, dev)) ||
		(r = cuModuleLoadData(&mod, ptx)) || (r = cuModuleGetFunction(&fn, mod, "fault"))) {
		cuGetErrorName(r, &name);
		fprintf(stderr, "fault: CUDA set-up failed: %s\n", name);
		return 2;
	}
	if ((r = cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0)) == 0) r = cuCtxSynchronize();
	if (r) cuGetErrorName(r, &name); else name = "CUDA_SUCCESS";
	printf("fault: %s\n", name);
	return r ? 0 : 1;
}
