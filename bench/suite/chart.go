package suite

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"

	"github.com/multiplane/multiplane/bench"
)

var (
	white     = color.RGBA{255, 255, 255, 255}
	black     = color.RGBA{30, 30, 30, 255}
	grid      = color.RGBA{220, 220, 220, 255}
	modeColor = map[bench.Mode]color.RGBA{
		bench.ModeMultipath: {31, 119, 180, 255},
		bench.ModeGBN:       {214, 39, 40, 255},
		bench.ModeMPTCP:     {44, 160, 44, 255},
		bench.ModeTCP:       {255, 127, 14, 255},
	}
	otherColor = color.RGBA{148, 103, 189, 255}
)

func colorOf(m bench.Mode) color.RGBA {
	if c, ok := modeColor[m]; ok {
		return c
	}
	return otherColor
}

// WriteChart draws a grouped bar chart: one group per (scenario, loss),
// one bar per mode, height = median goodput as % of line rate.
func WriteChart(w io.Writer, rep *Report) error {
	c := rep.Config
	type group struct {
		label string
		figs  []*Figure
	}
	var groups []group
	for _, name := range c.Scenarios {
		sc, _ := scenario(name)
		if !sc.Throughput() {
			continue
		}
		for _, l := range c.lossesOf(sc) {
			g := group{label: fmt.Sprintf("%s %s", name, lossLabel(l))}
			for _, m := range c.Modes {
				g.figs = append(g.figs, find(rep.Figures, name, l, m))
			}
			groups = append(groups, g)
		}
	}
	const (
		scale   = 2
		left    = 90
		right   = 30
		top     = 90
		bottom  = 110
		plotH   = 420
		barW    = 26
		groupGp = 30
	)
	nm := len(c.Modes)
	groupW := nm*barW + groupGp
	legend := ""
	for _, name := range c.Scenarios {
		sc, _ := scenario(name)
		switch {
		case !sc.Throughput():
		case sc.Incast():
			legend += fmt.Sprintf("%s = %d hosts into 1, -q %d   ", name, sc.Senders, sc.Conns)
		case sc.Conns > 0:
			legend += fmt.Sprintf("%s = -q %d   ", name, sc.Conns)
		default:
			legend += fmt.Sprintf("%s = %dx%s MTU %d   ", name, sc.Planes, shortRate(sc.RateBps), sc.MTU)
		}
	}
	width := max(left+right+len(groups)*groupW, left+right+textWidth(legend, scale), 900)
	height := top + plotH + bottom
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	fillRect(img, 0, 0, width, height, white)

	title := fmt.Sprintf("Goodput, %% of line rate (median of %d runs, %v each)", c.Runs, c.Duration)
	drawText(img, left, 20, scale, black, title)
	// Legend.
	lx := left
	for _, m := range c.Modes {
		col := colorOf(m)
		fillRect(img, lx, 55, 16, 16, col)
		drawText(img, lx+22, 56, scale, black, string(m))
		lx += 22 + textWidth(string(m), scale) + 30
	}
	// Axis and grid, 0..100% (values above 100 are clipped).
	y := func(pct float64) int { return top + plotH - int(pct/100*plotH) }
	for p := 0; p <= 100; p += 20 {
		fillRect(img, left, y(float64(p)), width-left-right, 1, grid)
		lbl := fmt.Sprintf("%d%%", p)
		drawText(img, left-10-textWidth(lbl, scale), y(float64(p))-7, scale, black, lbl)
	}
	fillRect(img, left, top, 2, plotH, black)
	fillRect(img, left, top+plotH, width-left-right, 2, black)

	for gi, g := range groups {
		gx := left + groupGp/2 + gi*groupW
		for mi, f := range g.figs {
			x := gx + mi*barW
			if f == nil {
				continue
			}
			if len(f.Runs) == 0 {
				drawText(img, x+3, y(0)-20, 1, black, "N/A")
				continue
			}
			pct := 100 * f.Goodput / f.Scenario.LineRate()
			h := min(pct, 100)
			fillRect(img, x+2, y(h), barW-4, y(0)-y(h), colorOf(c.Modes[mi]))
			lbl := fmt.Sprintf("%.0f", pct)
			drawText(img, x+barW/2-textWidth(lbl, 1)/2, y(h)-10, 1, black, lbl)
		}
		lw := textWidth(g.label, scale)
		drawText(img, gx+(nm*barW-lw)/2, top+plotH+14, scale, black, g.label)
	}
	drawText(img, left, top+plotH+50, scale, black, legend)
	drawText(img, left, top+plotH+78, 1, black, "netns fabric, tbf rate per switch port, nftables random loss in the switches; tcp = one plane only; I1: % of the receiver's capacity")
	return png.Encode(w, img)
}

func shortRate(bps int64) string {
	if bps >= 1e9 && bps%1e9 == 0 {
		return fmt.Sprintf("%dG", bps/1e9)
	}
	return fmt.Sprintf("%dM", bps/1e6)
}

// WriteLatencyChart draws L1: per mode and poll mode, bars of the median
// p50, p99 and p99.9 round trip in µs. It reports false (and writes
// nothing) when L1 has no figures.
func WriteLatencyChart(w io.Writer, rep *Report) (bool, error) {
	sc, _ := scenario("L1")
	figs := latencyFigures(rep, sc)
	if len(figs) == 0 {
		return false, nil
	}
	const (
		scale  = 2
		left   = 110
		right  = 30
		top    = 90
		bottom = 90
		plotH  = 420
		barW   = 30
		groupW = 3*barW + 60
	)
	cols := []struct {
		name string
		col  color.RGBA
		v    func(f *Figure) float64
	}{
		{"p50", color.RGBA{31, 119, 180, 255}, func(f *Figure) float64 { return f.Latency.TypicalUs }},
		{"p99", color.RGBA{255, 127, 14, 255}, func(f *Figure) float64 { return f.Latency.P99Us }},
		{"p99.9", color.RGBA{214, 39, 40, 255}, func(f *Figure) float64 { return f.Latency.P999Us }},
	}
	top99 := 0.0
	for _, f := range figs {
		top99 = max(top99, f.Latency.P999Us)
	}
	step := niceStep(top99 / 5)
	ymax := step * float64(int(top99/step)+1)
	width := max(left+right+len(figs)*groupW, 900)
	height := top + plotH + bottom
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	fillRect(img, 0, 0, width, height, white)
	drawText(img, left, 20, scale, black, fmt.Sprintf("%d-byte round trip, us (median of %d runs)", latencySize, rep.Config.Runs))
	lx := left
	for _, c := range cols {
		fillRect(img, lx, 55, 16, 16, c.col)
		drawText(img, lx+22, 56, scale, black, c.name)
		lx += 22 + textWidth(c.name, scale) + 30
	}
	y := func(v float64) int { return top + plotH - int(v/ymax*plotH) }
	for v := 0.0; v <= ymax+step/2; v += step {
		fillRect(img, left, y(v), width-left-right, 1, grid)
		lbl := fmt.Sprintf("%.0f", v)
		drawText(img, left-10-textWidth(lbl, scale), y(v)-7, scale, black, lbl)
	}
	fillRect(img, left, top, 2, plotH, black)
	fillRect(img, left, top+plotH, width-left-right, 2, black)
	for gi, f := range figs {
		gx := left + 30 + gi*groupW
		for ci, c := range cols {
			v := c.v(f)
			x := gx + ci*barW
			fillRect(img, x+2, y(v), barW-4, y(0)-y(v), c.col)
			lbl := fmt.Sprintf("%.0f", v)
			drawText(img, x+barW/2-textWidth(lbl, 1)/2, y(v)-10, 1, black, lbl)
		}
		lbl := string(f.Mode)
		if f.Poll != "" {
			lbl += " " + f.Poll
		}
		drawText(img, gx+(3*barW-textWidth(lbl, 1))/2, top+plotH+14, 1, black, lbl)
	}
	drawText(img, left, top+plotH+50, 1, black, "R1 netns fabric, one connection, one message in flight; multipath/gbn per poll mode, mptcp/tcp = kernel")
	return true, png.Encode(w, img)
}

// niceStep rounds a grid step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := 1.0
	for p*10 <= raw {
		p *= 10
	}
	for p > raw {
		p /= 10
	}
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}
