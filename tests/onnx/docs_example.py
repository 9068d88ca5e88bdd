#!/usr/bin/python3
# docs_example.py -- the worked example of docs/onnx.md, verbatim: a small
# PyTorch CNN exported to model.onnx (in the current directory) with a
# dynamic batch axis. tests/cli/test_onnx_doc.sh runs it and then the pcgc
# commands the document shows. Keep the two in step.
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 8, kernel_size=3, padding=1)
        self.fc = torch.nn.Linear(8 * 14 * 14, 10)

    def forward(self, x):                                  # x (B, 1, 28, 28)
        x = torch.relu(self.conv(x))                       # (B, 8, 28, 28)
        x = torch.nn.functional.max_pool2d(x, 2)           # (B, 8, 14, 14)
        return self.fc(torch.flatten(x, 1))                # (B, 10)


model = Net().eval()
example = torch.randn(1, 1, 28, 28)
torch.onnx.export(model, example, "model.onnx",
                  input_names=["image"], output_names=["logits"],
                  dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})
print(sum(p.numel() for p in model.parameters()), "parameters")
