// Portico reads @ricky0123/vad-web's model file only; its code, which would load onnxruntime-web, is never run.
throw new Error('onnxruntime-web is not installed: Portico runs the Silero VAD model with sherpa-onnx');
