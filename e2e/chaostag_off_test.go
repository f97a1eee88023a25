//go:build !chaos

package e2e

const chaosBuild = false
