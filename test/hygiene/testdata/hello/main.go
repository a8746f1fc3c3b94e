// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Command hello is the binary TestGuardFailsOnAPlantedBinary builds and plants.
package main

func main() {}
