// Package inventory discovers the GPUs of a node through NVML and what the
// node can enforce about their memory. It is the only package that talks to
// NVML for discovery; everything downstream (the ResourceSlice model, claim
// planning) works on the plain values it returns, so it can be tested with
// go-nvml's mock servers and fed by the simulator.
package inventory
