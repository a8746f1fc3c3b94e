package status

import (
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

func parseQuantity(s string) (int64, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, err
	}
	return q.Value(), nil
}

// deviceOrder sorts gpu-2 before gpu-10.
func deviceOrder(name string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(name, "gpu-"))
	if err != nil {
		return -1
	}
	return n
}
