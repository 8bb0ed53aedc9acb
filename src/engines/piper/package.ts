/** The npm package that runs the neural voices (an optional dependency; its platform packages hold the library). */
export { SHERPA_PACKAGE } from '../shared/sherpa.js';
