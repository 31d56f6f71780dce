package task

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Model is the model family of a solution.
type Model int

// Model families.
const (
	// Ridge is closed-form ridge regression (a least-squares ±1 classifier
	// for classification). Uses Features and Reg.
	Ridge Model = iota
	// GradientDescent is a linear model (squared loss or logistic loss)
	// trained by full-batch gradient descent. Uses Features, Reg, LR, Iters.
	GradientDescent
	// KNN is k-nearest-neighbours (mean or majority vote). Uses Features and
	// Capacity (k).
	KNN
	// RandomNet is a one-hidden-layer ReLU network with random hidden
	// weights and a ridge read-out. Uses Features, Reg and Capacity (width).
	RandomNet
	// Boosting is gradient boosting of decision stumps with L2-regularized
	// Newton leaves. Uses Features, Reg (leaf penalty), LR (shrinkage) and
	// Iters (rounds).
	Boosting

	numModels = iota
)

// Transform is the feature transform applied before the model.
type Transform int

// Feature transforms. All statistics are fitted on the rows the model is
// trained on.
const (
	// Raw leaves features as observed (scales span three decades).
	Raw Transform = iota
	// Standardize z-scores every feature.
	Standardize
	// Poly2 standardizes, then appends all squares and pairwise products.
	Poly2
	// Fourier standardizes, then maps to random Fourier features.
	Fourier
)

// Choice values. The index of a value is what a Solution stores.
var (
	modelNames     = [numModels]string{"ridge", "gd", "knn", "randnet", "boost"}
	transformNames = []string{"raw", "standardize", "poly2", "fourier"}
	regValues      = []float64{0, 1e-3, 1e-2, 1e-1, 1}
	lrValues       = []float64{0.01, 0.1, 0.5, 2}
	iterValues     = []int{10, 30, 100, 300}
	kValues        = []int{1, 5, 15, 45}
	widthValues    = []int{32, 64, 128, 256}
)

// decision indices into a Solution's choice vector.
const (
	decModel = iota
	decFeatures
	decReg
	decLR
	decIters
	decCapacity
	numDecisions
)

var decisionNames = [numDecisions]string{"model", "features", "reg", "lr", "iters", "capacity"}

// decisionSizes is the number of choices per decision.
var decisionSizes = [numDecisions]int{
	len(modelNames), len(transformNames), len(regValues), len(lrValues), len(iterValues), len(kValues),
}

// uses reports which decisions a model family reads; the others do not
// affect its score.
var uses = [numModels][numDecisions]bool{
	Ridge:           {decModel: true, decFeatures: true, decReg: true},
	GradientDescent: {decModel: true, decFeatures: true, decReg: true, decLR: true, decIters: true},
	KNN:             {decModel: true, decFeatures: true, decCapacity: true},
	RandomNet:       {decModel: true, decFeatures: true, decReg: true, decCapacity: true},
	Boosting:        {decModel: true, decFeatures: true, decReg: true, decLR: true, decIters: true},
}

// Solution is one candidate configuration: a choice index per decision.
// Derived hyperparameters are available through methods. The zero value is a
// valid solution (ridge on raw features, no regularization).
type Solution struct {
	Model    Model
	Features Transform
	// Reg indexes {0, 1e-3, 1e-2, 1e-1, 1}.
	Reg int
	// LR indexes {0.01, 0.1, 0.5, 2}.
	LR int
	// Iters indexes {10, 30, 100, 300}.
	Iters int
	// Capacity indexes k ∈ {1, 5, 15, 45} for KNN and width ∈ {32, 64,
	// 128, 256} for RandomNet.
	Capacity int
}

// Regularization returns the regularization strength.
func (s Solution) Regularization() float64 { return regValues[s.Reg] }

// LearningRate returns the step size (GD) or shrinkage (boosting).
func (s Solution) LearningRate() float64 { return lrValues[s.LR] }

// Iterations returns the number of GD steps or boosting rounds.
func (s Solution) Iterations() int { return iterValues[s.Iters] }

// Neighbours returns k for KNN.
func (s Solution) Neighbours() int { return kValues[s.Capacity] }

// Width returns the hidden width for RandomNet.
func (s Solution) Width() int { return widthValues[s.Capacity] }

func (s Solution) choices() [numDecisions]int {
	return [numDecisions]int{int(s.Model), int(s.Features), s.Reg, s.LR, s.Iters, s.Capacity}
}

func fromChoices(c [numDecisions]int) Solution {
	return Solution{Model: Model(c[decModel]), Features: Transform(c[decFeatures]), Reg: c[decReg], LR: c[decLR], Iters: c[decIters], Capacity: c[decCapacity]}
}

// Validate reports the first out-of-range choice, naming its field.
func (s Solution) Validate() error {
	c := s.choices()
	for d, v := range c {
		if v < 0 || v >= decisionSizes[d] {
			return fmt.Errorf("%w: field %q: index %d out of range [0,%d)", ErrInvalidSolution, decisionNames[d], v, decisionSizes[d])
		}
	}
	return nil
}

// Effective returns the solution with the decisions its model family ignores
// set to index 0. Two solutions with equal Effective() get identical scores
// from Execute and from every WorldModel.
func (s Solution) Effective() Solution {
	c := s.choices()
	u := uses[s.Model]
	for d := range c {
		if !u[d] {
			c[d] = 0
		}
	}
	return fromChoices(c)
}

// String is a compact human-readable form listing only the hyperparameters
// the model family uses, e.g. "gd(poly2, reg=0.01, lr=0.1, iters=100)".
func (s Solution) String() string {
	if s.Validate() != nil {
		return fmt.Sprintf("invalid%v", s.choices())
	}
	var b strings.Builder
	b.WriteString(modelNames[s.Model])
	b.WriteString("(")
	b.WriteString(transformNames[s.Features])
	u := uses[s.Model]
	if u[decReg] {
		fmt.Fprintf(&b, ", reg=%g", s.Regularization())
	}
	if u[decLR] {
		fmt.Fprintf(&b, ", lr=%g", s.LearningRate())
	}
	if u[decIters] {
		fmt.Fprintf(&b, ", iters=%d", s.Iterations())
	}
	if u[decCapacity] {
		if s.Model == KNN {
			fmt.Fprintf(&b, ", k=%d", s.Neighbours())
		} else {
			fmt.Fprintf(&b, ", width=%d", s.Width())
		}
	}
	b.WriteString(")")
	return b.String()
}

// solutionJSON fixes the canonical field order of the artifact.
type solutionJSON struct {
	Model    string  `json:"model"`
	Features string  `json:"features"`
	Reg      float64 `json:"reg"`
	LR       float64 `json:"lr"`
	Iters    int     `json:"iters"`
	Capacity int     `json:"capacity"`
}

// Encode returns the canonical JSON artifact of the configuration, with
// values rather than indices so the rollout record is readable on its own;
// every decision is present, including ones the model family ignores (the
// policy chose them). An invalid solution encodes as JSON null.
func (s Solution) Encode() []byte {
	if s.Validate() != nil {
		return []byte("null")
	}
	b, err := json.Marshal(solutionJSON{
		Model:    modelNames[s.Model],
		Features: transformNames[s.Features],
		Reg:      s.Regularization(),
		LR:       s.LearningRate(),
		Iters:    s.Iterations(),
		Capacity: s.Capacity,
	})
	if err != nil {
		return []byte("null")
	}
	return b
}

// DecodeSolution parses an artifact produced by Encode. It is strict: the
// input must be one JSON object with exactly the six fields, no duplicates,
// each value one of the allowed choices, and nothing after it. Errors wrap
// ErrInvalidSolution and name the offending field.
func DecodeSolution(b []byte) (Solution, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	fail := func(format string, args ...any) (Solution, error) {
		return Solution{}, fmt.Errorf("%w: %s", ErrInvalidSolution, fmt.Sprintf(format, args...))
	}
	tok, err := dec.Token()
	if err != nil {
		return fail("not a JSON object: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fail("not a JSON object")
	}
	var c [numDecisions]int
	var seen [numDecisions]bool
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fail("malformed object: %v", err)
		}
		key, _ := tok.(string)
		d := -1
		for i, n := range decisionNames {
			if n == key {
				d = i
			}
		}
		if d < 0 {
			return fail("unknown field %q", key)
		}
		if seen[d] {
			return fail("field %q: duplicate", key)
		}
		seen[d] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fail("field %q: %v", key, err)
		}
		idx, err := decodeChoice(d, raw)
		if err != nil {
			return fail("field %q: %v", key, err)
		}
		c[d] = idx
	}
	if _, err := dec.Token(); err != nil {
		return fail("malformed object: %v", err)
	}
	for d, ok := range seen {
		if !ok {
			return fail("field %q: missing", decisionNames[d])
		}
	}
	if _, err := dec.Token(); err != io.EOF {
		return fail("trailing data after object")
	}
	return fromChoices(c), nil
}

func decodeChoice(d int, raw json.RawMessage) (int, error) {
	switch d {
	case decModel, decFeatures:
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, fmt.Errorf("want a string, got %s", raw)
		}
		names := modelNames[:]
		if d == decFeatures {
			names = transformNames
		}
		if i := slices.Index(names, s); i >= 0 {
			return i, nil
		}
		return 0, fmt.Errorf("%q not one of %v", s, names)
	}
	var num json.Number
	if len(raw) == 0 || raw[0] == '"' || json.Unmarshal(raw, &num) != nil {
		return 0, fmt.Errorf("want a number, got %s", raw)
	}
	switch d {
	case decReg, decLR:
		v, err := strconv.ParseFloat(num.String(), 64)
		if err != nil {
			return 0, fmt.Errorf("bad number %s", num)
		}
		values := regValues
		if d == decLR {
			values = lrValues
		}
		if i := slices.Index(values, v); i >= 0 {
			return i, nil
		}
		return 0, fmt.Errorf("%s not one of %v", num, values)
	case decIters:
		v, err := strconv.ParseInt(num.String(), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("want an integer, got %s", num)
		}
		if i := slices.IndexFunc(iterValues, func(a int) bool { return int64(a) == v }); i >= 0 {
			return i, nil
		}
		return 0, fmt.Errorf("%s not one of %v", num, iterValues)
	default:
		v, err := strconv.ParseInt(num.String(), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("want an integer, got %s", num)
		}
		if v < 0 || v >= int64(len(kValues)) {
			return 0, fmt.Errorf("%d out of range [0,%d)", v, len(kValues))
		}
		return int(v), nil
	}
}
