//! `recall_at_k.svg`: Recall@k and NDCG@k for k = 1..N, one line per stage
//! and measure, drawn with plotters' SVG backend.

use plotters::prelude::*;

use crate::report::Curve;

/// The plot as SVG text.
pub(crate) fn svg(curves: &[Curve], depth: usize) -> String {
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (720, 440)).into_drawing_area();
        // Drawing into a string cannot fail for I/O reasons; a failure would
        // only leave the plot incomplete, which the caller does not depend on.
        let _ = draw(&root, curves, depth);
        let _ = root.present();
    }
    text
}

fn draw(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    curves: &[Curve],
    depth: usize,
) -> Result<(), String> {
    let text = |e: DrawingAreaErrorKind<std::io::Error>| e.to_string();
    root.fill(&WHITE).map_err(text)?;
    let depth = depth.max(2);
    let mut chart = ChartBuilder::on(root)
        .caption("Recall@k and NDCG@k by stage", ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(36)
        .y_label_area_size(48)
        .build_cartesian_2d(1usize..depth, 0.0f64..1.0)
        .map_err(text)?;
    chart
        .configure_mesh()
        .x_desc("k")
        .y_desc("mean over queries")
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(text)?;
    let palette = [BLUE, RED, GREEN, MAGENTA];
    for (i, curve) in curves.iter().enumerate() {
        let color = palette[i % palette.len()];
        let recall = curve.recall.iter().enumerate().map(|(k, v)| (k + 1, *v));
        chart
            .draw_series(LineSeries::new(recall, color.stroke_width(2)))
            .map_err(text)?
            .label(format!("{} Recall@k", curve.stage))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2)));
        let ndcg = curve.ndcg.iter().enumerate().map(|(k, v)| (k + 1, *v));
        let dashed = color.mix(0.55).stroke_width(2);
        chart
            .draw_series(LineSeries::new(ndcg, dashed))
            .map_err(text)?
            .label(format!("{} NDCG@k", curve.stage))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], dashed));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(text)?;
    Ok(())
}
