/** The npm package that runs the neural voices (an optional dependency; its platform packages hold the library). */
export const SHERPA_PACKAGE = 'sherpa-onnx-node';
