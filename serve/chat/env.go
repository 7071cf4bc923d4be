package chat

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/builtins/methods"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
)

// Names of the filters the tree rewrite inserts. They contain a dot, which a filter name in
// template source cannot, so templates cannot call or shadow them.
const (
	filterNameAdd     = "memra.add"
	filterNameIn      = "memra.in"
	filterNameGetItem = "memra.getitem"
	filterNameStr     = "memra.str"
)

// newConfig returns the parser configuration transformers uses: trim_blocks and lstrip_blocks.
func newConfig() *config.Config {
	c := config.New()
	c.TrimBlocks = true
	c.LeftStripBlocks = true
	return c
}

// newEnvironment builds the gonja environment shared by all templates: gonja's built-ins with
// the filters, tests and dict methods whose behaviour differs from jinja2 replaced.
func newEnvironment() *exec.Environment {
	filters := exec.NewFilterSet(map[string]exec.FilterFunction{})
	filters.Update(builtins.Filters)
	mustReplaceFilter(filters, "tojson", filterToJSON)
	mustReplaceFilter(filters, "items", filterItems)
	mustReplaceFilter(filters, "trim", filterTrim)
	mustReplaceFilter(filters, "string", filterString)
	mustRegisterFilter(filters, filterNameStr, filterStr)
	mustRegisterFilter(filters, filterNameAdd, filterAdd)
	mustRegisterFilter(filters, filterNameIn, filterIn)
	mustRegisterFilter(filters, filterNameGetItem, filterGetItem)

	tests := exec.NewTestSet(map[string]exec.TestFunction{})
	tests.Update(builtins.Tests)
	for name, fn := range map[string]exec.TestFunction{
		"defined": testDefined, "undefined": testUndefined, "true": testTrue, "false": testFalse,
	} {
		if err := tests.Replace(name, fn); err != nil {
			panic("BUG: " + err.Error())
		}
	}

	ms := methods.All
	ms.Dict = exec.NewMethodSet[map[string]any](dictMethods())

	globals := exec.EmptyContext().Update(builtins.GlobalFunctions).Update(builtins.GlobalVariables)
	globals.Set("range", pyRange)
	return &exec.Environment{
		Context:           globals,
		Filters:           filters,
		Tests:             tests,
		ControlStructures: builtins.ControlStructures,
		Methods:           ms,
	}
}

func mustReplaceFilter(fs *exec.FilterSet, name string, fn exec.FilterFunction) {
	if err := fs.Replace(name, fn); err != nil {
		panic("BUG: " + err.Error())
	}
}

func mustRegisterFilter(fs *exec.FilterSet, name string, fn exec.FilterFunction) {
	if err := fs.Register(name, fn); err != nil {
		panic("BUG: " + err.Error())
	}
}

// selfDict returns the ordered dict a method was called on.
func selfDict(self *exec.Value) (*exec.Dict, bool) {
	d, ok := self.Interface().(*exec.Dict)
	return d, ok
}

// dictMethods are Python's dict methods over gonja's ordered dict, keeping insertion order
// (gonja's own versions work on an unordered copy).
func dictMethods() map[string]exec.Method[map[string]any] {
	type method = exec.Method[map[string]any]
	lookup := func(d []*exec.Pair, key *exec.Value) int {
		for i, p := range d {
			if p.Key.EqualValueTo(key) {
				return i
			}
		}
		return -1
	}
	return map[string]method{
		"keys": func(_ map[string]any, self *exec.Value, args *exec.VarArgs) (any, error) {
			out := []any{}
			for _, p := range dictPairs(self) {
				out = append(out, p.Key.Interface())
			}
			return out, args.Take()
		},
		"values": func(_ map[string]any, self *exec.Value, args *exec.VarArgs) (any, error) {
			out := []any{}
			for _, p := range dictPairs(self) {
				out = append(out, p.Value.Interface())
			}
			return out, args.Take()
		},
		"items": func(_ map[string]any, self *exec.Value, args *exec.VarArgs) (any, error) {
			return itemList(self), args.Take()
		},
		"get": func(_ map[string]any, self *exec.Value, args *exec.VarArgs) (any, error) {
			if len(args.Args) < 1 || len(args.Args) > 2 || len(args.KwArgs) > 0 {
				return nil, errors.New("get() takes 1 or 2 positional arguments")
			}
			pairs := dictPairs(self)
			if i := lookup(pairs, args.Args[0]); i >= 0 {
				return pairs[i].Value.Interface(), nil
			}
			if len(args.Args) == 2 {
				return args.Args[1].Interface(), nil
			}
			return pyNone, nil
		},
		"pop": func(_ map[string]any, self *exec.Value, args *exec.VarArgs) (any, error) {
			d, ok := selfDict(self)
			if !ok || len(args.Args) < 1 || len(args.Args) > 2 {
				return nil, errors.New("pop() takes 1 or 2 positional arguments")
			}
			if i := lookup(d.Pairs, args.Args[0]); i >= 0 {
				v := d.Pairs[i].Value
				d.Pairs = append(d.Pairs[:i:i], d.Pairs[i+1:]...)
				return v.Interface(), nil
			}
			if len(args.Args) == 2 {
				return args.Args[1].Interface(), nil
			}
			return nil, fmt.Errorf("KeyError: %s", args.Args[0].String())
		},
		"setdefault": func(_ map[string]any, self *exec.Value, args *exec.VarArgs) (any, error) {
			d, ok := selfDict(self)
			if !ok || len(args.Args) < 1 || len(args.Args) > 2 {
				return nil, errors.New("setdefault() takes 1 or 2 positional arguments")
			}
			if i := lookup(d.Pairs, args.Args[0]); i >= 0 {
				return d.Pairs[i].Value.Interface(), nil
			}
			v := exec.AsValue(nil)
			if len(args.Args) == 2 {
				v = args.Args[1]
			}
			d.Pairs = append(d.Pairs, &exec.Pair{Key: args.Args[0], Value: v})
			return v.Interface(), nil
		},
		"update": func(_ map[string]any, self *exec.Value, args *exec.VarArgs) (any, error) {
			d, ok := selfDict(self)
			if !ok || len(args.Args) > 1 {
				return nil, errors.New("update() takes at most 1 positional argument")
			}
			set := func(k, v *exec.Value) {
				if i := lookup(d.Pairs, k); i >= 0 {
					d.Pairs[i].Value = v
					return
				}
				d.Pairs = append(d.Pairs, &exec.Pair{Key: k, Value: v})
			}
			if len(args.Args) == 1 && args.Args[0].IsDict() {
				for _, p := range dictPairs(args.Args[0]) {
					set(p.Key, p.Value)
				}
			}
			for _, k := range sortedKeys(args.KwArgs) {
				set(exec.AsValue(k), args.KwArgs[k])
			}
			return nil, nil
		},
		"copy": func(_ map[string]any, self *exec.Value, args *exec.VarArgs) (any, error) {
			out := exec.NewDict()
			for _, p := range dictPairs(self) {
				out.Pairs = append(out.Pairs, &exec.Pair{Key: p.Key, Value: p.Value})
			}
			return out, args.Take()
		},
	}
}

func sortedKeys(m map[string]*exec.Value) []string {
	return slices.Sorted(maps.Keys(m))
}

var (
	weekdays = []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
	months   = []string{"January", "February", "March", "April", "May", "June", "July", "August",
		"September", "October", "November", "December"}
)

// strftime formats t with Python's (C locale) strftime directives. Unknown directives are
// copied through, as glibc does.
func strftime(format string, t time.Time) string {
	var b strings.Builder
	two := func(n int) { b.WriteString(fmt.Sprintf("%02d", n)) }
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		switch format[i] {
		case 'a':
			b.WriteString(weekdays[t.Weekday()][:3])
		case 'A':
			b.WriteString(weekdays[t.Weekday()])
		case 'b', 'h':
			b.WriteString(months[t.Month()-1][:3])
		case 'B':
			b.WriteString(months[t.Month()-1])
		case 'd':
			two(t.Day())
		case 'e':
			b.WriteString(fmt.Sprintf("%2d", t.Day()))
		case 'm':
			two(int(t.Month()))
		case 'y':
			two(t.Year() % 100)
		case 'Y':
			b.WriteString(strconv.Itoa(t.Year()))
		case 'H':
			two(t.Hour())
		case 'I':
			two((t.Hour()+11)%12 + 1)
		case 'M':
			two(t.Minute())
		case 'S':
			two(t.Second())
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'j':
			b.WriteString(fmt.Sprintf("%03d", t.YearDay()))
		case 'w':
			b.WriteString(strconv.Itoa(int(t.Weekday())))
		case 'Z':
			name, _ := t.Zone()
			b.WriteString(name)
		case 'z':
			b.WriteString(t.Format("-0700"))
		case 'F':
			b.WriteString(t.Format("2006-01-02"))
		case 'T':
			b.WriteString(t.Format("15:04:05"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}

// maxRangeLen bounds range() as jinja2's sandbox (which transformers uses) does: a template
// cannot make a render loop for ever or fill memory.
const maxRangeLen = 100_000

// pyRange is Python's range([start,] stop[, step]) as a list. (gonja's streams the numbers
// from a goroutine that leaks when a loop stops early.)
func pyRange(params *exec.VarArgs) (any, error) {
	if len(params.KwArgs) > 0 || len(params.Args) < 1 || len(params.Args) > 3 {
		return nil, fmt.Errorf("%w: range expected 1 to 3 positional arguments", ErrType)
	}
	n := make([]int, len(params.Args))
	for i, a := range params.Args {
		if !a.IsInteger() {
			return nil, fmt.Errorf("%w: range() argument must be int, not %s", ErrType, pyTypeName(a))
		}
		n[i] = a.Integer()
	}
	start, stop, step := 0, n[0], 1
	if len(n) >= 2 {
		start, stop = n[0], n[1]
	}
	if len(n) == 3 {
		step = n[2]
	}
	if step == 0 {
		return nil, errors.New("ValueError: range() arg 3 must not be zero")
	}
	var count int64
	if step > 0 && stop > start {
		count = (int64(stop) - int64(start) + int64(step) - 1) / int64(step)
	} else if step < 0 && stop < start {
		count = (int64(start) - int64(stop) - int64(step) - 1) / -int64(step)
	}
	if count > maxRangeLen {
		return nil, fmt.Errorf("%w: range of %d numbers is over the limit of %d", ErrRender, count, maxRangeLen)
	}
	out := make([]any, 0, count)
	for i, v := int64(0), int64(start); i < count; i, v = i+1, v+int64(step) {
		out = append(out, int(v))
	}
	return out, nil
}
