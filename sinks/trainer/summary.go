package trainer

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"

	"github.com/wmrl/wmrl/topics"
)

// Summary condenses a step into the numbers a trainer log line needs.
type Summary struct {
	Rows   int
	Masked int
	// Masked counts rows the loss ignores (Mask false, see topics.AdvantageRow).
	// Anchor counts unmasked rows whose reward is the executed score.
	Anchor int
	// MeanAbsAdvantage is the mean |advantage| over unmasked rows (0 if none).
	MeanAbsAdvantage float64
	// AnchorWeight is the mean IVD weight of unmasked anchor rows, NaN if the step has none.
	AnchorWeight float64
	// CalibrationVersion is the highest fit version the step's rows cite.
	CalibrationVersion uint64
}

// Summary computes the step's summary.
func (st *Step) Summary() Summary {
	s := Summary{Rows: len(st.Rows), AnchorWeight: math.NaN()}
	var absSum, wSum float64
	for i := range st.Rows {
		r := &st.Rows[i]
		s.CalibrationVersion = max(s.CalibrationVersion, r.CalibrationVersion)
		if !r.Mask {
			s.Masked++
			continue
		}
		absSum += math.Abs(r.Advantage)
		if r.Source == topics.SourceAnchor {
			s.Anchor++
			wSum += r.Weight
		}
	}
	if used := s.Rows - s.Masked; used > 0 {
		s.MeanAbsAdvantage = absSum / float64(used)
	}
	if s.Anchor > 0 {
		s.AnchorWeight = wSum / float64(s.Anchor)
	}
	return s
}

// WriteTable prints the step's rows as an aligned table: group, rollout, source, predicted,
// calibrated, executed, used, advantage, weight, mask (true: the row counts in the loss); a
// missing score prints as "-".
func WriteTable(w io.Writer, st *Step) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "group\trollout\tsource\tpredicted\tcalibrated\texecuted\tused\tadvantage\tweight\tmask\n")
	for i := range st.Rows {
		r := &st.Rows[i]
		src := cmp.Or(string(r.Source), "-")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%t\n", r.GroupID, r.RolloutID, src,
			optFloat(r.Predicted, r.PredictedOK), num(r.Calibrated), optFloat(r.Executed, r.ExecutedOK),
			num(r.Used), num(r.Advantage), num(r.Weight), r.Mask)
	}
	return tw.Flush()
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }

func optFloat(v float64, ok bool) string {
	if !ok {
		return "-"
	}
	return num(v)
}
