"""Train a small CNN on scikit-learn's handwritten digits with ember: the whole loop in one page.

    python examples/train_digits.py [device]      # e.g. cpu (default) or vulkan
"""

import sys

import numpy as np
from sklearn.datasets import load_digits

import ember_core as em
from ember_core import nn, optim
from ember_core.autograd import no_grad
from ember_core.data import DataLoader, TensorDataset

device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
em.manual_seed(0)

# data: 1,797 8x8 images in [0, 16], shuffled; the last 20% are held out for testing
digits = load_digits()
order = em.permutation(len(digits.target), device=device)
images = em.asarray((digits.images / 16.0).astype(np.float32)[:, None], device=device)[order]  # (N, 1, 8, 8)
labels = em.asarray(digits.target, device=device)[order]
split = int(0.8 * len(digits.target))
train = DataLoader(TensorDataset(images[:split], labels[:split]), batch_size=32, shuffle=True)

model = nn.Sequential(
    nn.Conv2d(1, 16, 3, padding=1, device=device), nn.ReLU(),
    nn.Conv2d(16, 32, 3, padding=1, device=device), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(32 * 4 * 4, 64, device=device), nn.ReLU(), nn.Linear(64, 10, device=device),
)
optimizer = optim.Adam(model.parameters(), lr=3e-3)
loss_fn = nn.CrossEntropyLoss()

for epoch in range(8):
    model.train()
    for x, y in train:
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with no_grad():
        predictions = em.argmax(model(images[split:]), axis=1)
    accuracy = em.mean(em.astype(predictions == labels[split:], em.float32)).item()
    print(f"epoch {epoch + 1}: last batch loss {loss.item():.3f}, test accuracy {accuracy:.1%}")
