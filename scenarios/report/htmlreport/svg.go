package htmlreport

import (
	"fmt"
	"strings"
)

// Geometry of a cell's timeline, in SVG user units.
const (
	labelWidth  = 200 // the lane and row names on the left
	columnWidth = 66  // one timeline step
	axisHeight  = 34
	bandHeight  = 16
	laneHeader  = 20
	rowHeight   = 15
	barHeight   = 10
	gap         = 6
)

// shape is one SVG element of a timeline. Pod and Class end up as
// data-pod and data-class attributes: the browser test finds the leaked
// rules by them.
type shape struct {
	Tag        string // rect, text, circle, line, path
	X, Y, W, H float64
	R          float64
	D          string
	Class      string
	Text       string
	Title      string
	Pod, Kind  string
}

// svgView is a drawing's shapes and size.
type svgView struct {
	Width, Height float64
	Shapes        []shape
}

func colX(i int) float64 { return labelWidth + float64(i)*columnWidth }

// render places a drawing's columns, band, lanes, bars and marks.
func render(d drawing) svgView {
	var v svgView
	n := len(d.Columns)
	v.Width = colX(n) + 12
	y := 0.0
	for _, c := range d.Columns {
		x := colX(c.Index)
		title := c.Label + ": " + c.Event
		if len(c.Notes) > 0 {
			title += "\n· " + strings.Join(c.Notes, "\n· ")
		}
		v.Shapes = append(v.Shapes,
			shape{Tag: "rect", X: x, Y: 0, W: columnWidth, H: axisHeight - 4, Class: "col col" + fmt.Sprint(c.Index%2), Title: title},
			shape{Tag: "text", X: x + 4, Y: 12, Class: "axis", Text: fmt.Sprintf("%d", c.Index+1), Title: title},
			shape{Tag: "text", X: x + 4, Y: 25, Class: "axis small", Text: c.Label, Title: title})
	}
	y = axisHeight
	if len(d.Band) > 0 {
		v.Shapes = append(v.Shapes, shape{Tag: "text", X: 4, Y: y + 12, Class: "rowname", Text: "ipamd"})
		for _, s := range d.Band {
			cls := "band down"
			if s.Up {
				cls = "band up"
			}
			v.Shapes = append(v.Shapes, shape{Tag: "rect", X: colX(s.From), Y: y + 2, W: colX(s.To) - colX(s.From), H: bandHeight - 4, Class: cls, Title: s.Text})
		}
		y += bandHeight + gap
	}
	for _, l := range d.Lanes {
		v.Shapes = append(v.Shapes,
			shape{Tag: "rect", X: 0, Y: y, W: v.Width, H: laneHeader + float64(l.tracks())*rowHeight + 4, Class: "lane", Pod: l.Pod},
			shape{Tag: "text", X: 4, Y: y + 14, Class: "podname", Text: l.Pod, Pod: l.Pod})
		perColumn := map[int]int{} // marks in one step stand side by side
		for _, m := range l.Marks {
			v.Shapes = append(v.Shapes, markShape(m, y, l.Pod, perColumn[m.Column]))
			perColumn[m.Column]++
		}
		for i, msg := range l.Misroutes {
			x := colX(n) - 10 - float64(i)*14
			v.Shapes = append(v.Shapes, shape{Tag: "path", D: fmt.Sprintf("M%.0f %.0f l6 -12 l6 12 z", x-6, y+17), Class: "misroute", Title: msg, Pod: l.Pod, Kind: "misroute"})
		}
		y += laneHeader
		for _, r := range l.Rows {
			v.Shapes = append(v.Shapes, shape{Tag: "text", X: 16, Y: y + 11, Class: "rowname", Text: r.Class})
			for _, track := range tracks(r.Bars) {
				for _, b := range track {
					v.Shapes = append(v.Shapes, barShape(b, y, l.Pod, r.Class))
				}
				y += rowHeight
			}
		}
		y += gap
	}
	v.Height = y + 4
	return v
}

// markShape is an ADD (a circle) or a DEL attempt (a diamond): filled
// when it succeeded.
func markShape(m laneMark, y float64, pod string, nth int) shape {
	x := colX(m.Column) + 10 + float64(nth%4)*13
	ok := "failed"
	if m.OK {
		ok = "ok"
	}
	if m.Add {
		return shape{Tag: "circle", X: x, Y: y + 10, R: 5, Class: "mark add " + ok, Title: m.Text, Pod: pod, Kind: "add"}
	}
	return shape{Tag: "path", D: fmt.Sprintf("M%.0f %.0f l6 6 l-6 6 l-6 -6 z", x, y+4), Class: "mark del " + ok, Title: m.Text, Pod: pod, Kind: "del"}
}

// tracks stacks a row's bars so that none hides another: the same object
// made again while an earlier one of it lives (a leaked VLAN link and the
// new sandbox's) goes on the next track.
func tracks(bars []bar) [][]bar {
	var out [][]bar
next:
	for _, b := range bars {
		for i, t := range out {
			if t[len(t)-1].To <= b.From {
				out[i] = append(t, b)
				continue next
			}
		}
		out = append(out, []bar{b})
	}
	return out
}

// tracks is how many tracks the lane's rows take.
func (l lane) tracks() int {
	n := 0
	for _, r := range l.Rows {
		n += len(tracks(r.Bars))
	}
	return n
}

func barShape(b bar, y float64, pod, class string) shape {
	cls := "obj"
	title := b.Line
	switch {
	case b.Leaked:
		cls += " leaked"
		title += "\n" + b.Finding
	case b.Outlived:
		cls += " alive"
	}
	return shape{Tag: "rect", X: colX(b.From) + 2, Y: y + 2, W: colX(b.To) - colX(b.From) - 4, H: barHeight,
		Class: cls, Title: title, Pod: pod, Kind: class}
}
