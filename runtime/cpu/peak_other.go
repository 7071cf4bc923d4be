//go:build !amd64 || purego

package cpu

const fmaUnit = "none"

func fmaLoop(int) float64 { return 0 }

func int8Loop(int) float64 { return 0 }
