/** Plotly's cartesian bundle (scatter, bar, heatmap) as an ES module: FieldPanel's views load it
 * once per page from the kernel (a custom message), so that each panel's own module stays small. */
import Plotly from 'plotly.js-cartesian-dist-min';

export default Plotly;
