// Command hostile is a test plugin that misbehaves on request: its template
// renders {"mode": …} by reading a file, dialling the network, panicking,
// allocating without end, looping, or writing a huge output; its grammars
// ("digits", "loop", "panic") accept digits, loop forever in a step, or
// panic in a step.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/memra-ai/memra/serve/plugin/sdk"
)

func init() {
	sdk.RegisterTemplate(render)
	sdk.RegisterGrammar(compile)
}

func main() {}

var sink [][]byte

func render(ctx []byte) (string, error) {
	var req struct{ Mode string }
	if err := json.Unmarshal(ctx, &req); err != nil {
		return "", err
	}
	switch req.Mode {
	case "file":
		_, err := os.ReadFile("/etc/passwd")
		return fmt.Sprintf("file: %v", err), nil
	case "net":
		_, err := net.Dial("tcp", "127.0.0.1:80")
		return fmt.Sprintf("net: %v", err), nil
	case "time":
		return time.Now().UTC().Format(time.RFC3339), nil
	case "rand":
		b := make([]byte, 8)
		rand.Read(b)
		return hex.EncodeToString(b), nil
	case "env":
		return fmt.Sprintf("%d %d", len(os.Environ()), len(os.Args)), nil
	case "panic":
		panic("hostile panic")
	case "bomb":
		for {
			sink = append(sink, make([]byte, 1<<20))
		}
	case "loop":
		for {
		}
	case "big":
		return strings.Repeat("x", 2<<20), nil
	case "fail":
		return "", fmt.Errorf("refused on purpose")
	}
	return "ok:" + req.Mode, nil
}

type grammar struct{ mode string }

func compile(src string) (sdk.Grammar, error) {
	switch src {
	case "digits", "loop", "panic":
		return grammar{src}, nil
	}
	return nil, fmt.Errorf("unknown grammar %q", src)
}

func (g grammar) Start() int32 { return 0 }

func (g grammar) Next(s int32, b byte) int32 {
	if b == '!' {
		switch g.mode {
		case "loop":
			for {
			}
		case "panic":
			panic("hostile step")
		}
	}
	if b >= '0' && b <= '9' || b == '!' {
		return 1
	}
	return -1
}

func (g grammar) CanEnd(s int32) bool { return s == 1 }
