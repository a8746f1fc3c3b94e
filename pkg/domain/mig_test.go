// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package domain_test

import (
	"testing"

	"github.com/gpufrac/gpufrac/pkg/domain"
)

func TestCompareMIGLayouts(t *testing.T) {
	a := domain.MIGDevice{UUID: "MIG-a", Parent: domain.GPU{Index: 1}, GIID: 1, CIID: 0}
	b := domain.MIGDevice{UUID: "MIG-b", Parent: domain.GPU{Index: 1}, GIID: 2, CIID: 0}
	recreated := a
	recreated.UUID = "MIG-a2"
	if c := domain.CompareMIGLayouts([]domain.MIGDevice{a, b}, []domain.MIGDevice{a, b}); !c.Empty() {
		t.Errorf("same layout: %+v", c)
	}
	c := domain.CompareMIGLayouts([]domain.MIGDevice{a, b}, []domain.MIGDevice{recreated})
	if len(c.Added) != 1 || c.Added[0] != "gpu-1-mig-1-0" || len(c.Removed) != 2 {
		t.Errorf("an instance recreated under its name is removed and added, b removed: %+v", c)
	}
}
