// node-llama-cpp asks a binaries package for its folder; none here, so it takes its CPU build.
exports.getBinsDir = () => ({});
