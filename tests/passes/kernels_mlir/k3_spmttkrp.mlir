// K3 SpMTTKRP: A[i,j] = sum_{k,l} B[i,k,l] * C[k,j] * D[l,j]; B CSF (i dense, k compressed, l compressed),
// C dense, D sparse stored (j dense, l compressed); loop order i, j, k, l.
#CSF = #sparse_tensor.encoding<{ map = (d0, d1, d2) -> (d0 : dense, d1 : compressed, d2 : compressed), posWidth = 32, crdWidth = 32 }>
#CSC = #sparse_tensor.encoding<{ map = (d0, d1) -> (d1 : dense, d0 : compressed), posWidth = 32, crdWidth = 32 }>
#trait = { indexing_maps = [affine_map<(i,j,k,l) -> (i,k,l)>, affine_map<(i,j,k,l) -> (k,j)>,
    affine_map<(i,j,k,l) -> (l,j)>, affine_map<(i,j,k,l) -> (i,j)>],
  iterator_types = ["parallel", "parallel", "reduction", "reduction"] }
func.func @k3(%b: tensor<6x5x16xf64, #CSF>, %c: tensor<5x4xf64>, %d: tensor<16x4xf64, #CSC>, %a: tensor<6x4xf64> {bufferization.writable = true}) -> tensor<6x4xf64> {
  %r = linalg.generic #trait ins(%b, %c, %d : tensor<6x5x16xf64, #CSF>, tensor<5x4xf64>, tensor<16x4xf64, #CSC>) outs(%a : tensor<6x4xf64>) {
  ^bb0(%x: f64, %y: f64, %w: f64, %z: f64):
    %m = arith.mulf %x, %y : f64
    %m2 = arith.mulf %m, %w : f64
    %s = arith.addf %z, %m2 : f64
    linalg.yield %s : f64
  } -> tensor<6x4xf64>
  return %r : tensor<6x4xf64>
}
