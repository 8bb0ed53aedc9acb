/** the microphone worklet's URL (/assets/capture-worklet-HASH.js), set by scripts/build-web.mjs */
declare const PORTICO_CAPTURE_WORKLET: string;
